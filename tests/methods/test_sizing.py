"""The fit rows a concept gets: a sentence when a small data set meets a large K, none otherwise."""

from vqlc_core.methods.sizing import SUGGESTED_ROWS_PER_CONCEPT, size_notes, suggested_count


def test_a_small_data_set_with_the_default_k_gets_one_sentence_per_set_with_a_number_to_pass():
    # the case: 300 MR texts, K = 400 on 1,424 word rows, 20 prediction concepts on 240 rows
    notes = size_notes(1424, 240, 400, 20)
    assert len(notes) == 2
    assert "400 word concepts on 1,424 fit rows is 3.6 rows a concept" in notes[0]
    assert f"--n-concepts {1424 // SUGGESTED_ROWS_PER_CONCEPT}" in notes[0]
    assert "20 prediction concepts on 240 fit rows is 12.0 rows a concept" in notes[1]
    assert "--prediction-concepts 12" in notes[1]


def test_the_full_default_data_set_gets_no_sentence():
    # the default preset's fit set (as its build logs it): 6,800 word rows, 3,200 train predictions
    assert size_notes(6800, 3200, 400, 20) == []
    assert len(size_notes(5500, 3200, 400, 20)) == 1  # 13.8 rows a concept


def test_without_prediction_concepts_k_is_counted_over_every_row():
    assert size_notes(1424, 240, 400, 0)[0].startswith("400 concepts on 1,664 fit rows")
    assert size_notes(7000, 1000, 400, 0) == []


def test_the_suggestion_gives_about_the_threshold_and_never_fewer_than_two():
    assert suggested_count(1424) == 71 and 1424 / suggested_count(1424) >= SUGGESTED_ROWS_PER_CONCEPT
    assert suggested_count(10) == 2


def test_a_note_names_the_budget_when_the_budget_binds_and_the_data_when_it_does_not():
    capped = size_notes(3000, 500, 400, 20, available=(40000, 500))
    assert "budget kept 3,000 of 40,000 word rows; raise --fit-max-words (up to 40,000)" in capped[0]
    data = size_notes(3000, 500, 400, 20, available=(3000, 500))
    assert "the train texts give no more word rows" in data[0] and "--fit-max-words" not in data[0]
