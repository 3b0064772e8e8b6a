"""How many fit rows a concept gets: one sentence for the build's log and the Build page when a
data set is too small for the number of concepts asked for (K = 400 on 300 texts leaves about 3.6
rows a concept), with the number to pass instead. K is kept as the user (or the preset) set it."""

from __future__ import annotations

# The paper's own setting, the default preset, fits 400 word concepts on 6,800 fit rows: 17 rows a
# concept. A set well below that (fewer than 15 rows a concept) is said in one sentence; the number
# suggested gives 20 rows a concept, as LACOAT's fit set keeps at most 20 occurrences of a word type
# (below that a concept may hold a single word's occurrences). Stated thresholds, not measured optima.
MIN_ROWS_PER_CONCEPT = 15
SUGGESTED_ROWS_PER_CONCEPT = 20


def suggested_count(n_rows: int, rows_per_concept: int = SUGGESTED_ROWS_PER_CONCEPT) -> int:
    """The largest number of concepts that gives every concept `rows_per_concept` fit rows on average (at least 2)."""
    return max(2, int(n_rows) // int(rows_per_concept))


def size_notes(n_word_rows: int, n_prediction_rows: int, n_concepts: int, prediction_concepts: int,
               min_rows: int = MIN_ROWS_PER_CONCEPT, available: tuple[int, int] | None = None) -> list[str]:
    """One sentence per concept set whose concepts average fewer than `min_rows` fit rows, naming
    the limit that binds: the fit set's budget for that kind of row when `available` (word rows,
    prediction rows before the budgets) says it dropped rows, else the data set itself.

    With prediction concepts (> 0) the K word concepts are fitted on the word rows and the
    prediction concepts on the prediction rows; with 0, K concepts are fitted on every row."""
    avail_words, avail_preds = available or (n_word_rows, n_prediction_rows)
    sets = ([("word concepts", n_word_rows, avail_words, n_concepts, "--n-concepts", "word rows", "--fit-max-words"),
             ("prediction concepts", n_prediction_rows, avail_preds, prediction_concepts, "--prediction-concepts",
              "prediction rows", "--fit-max-predictions")]
            if prediction_concepts > 0 else
            [("concepts", n_word_rows + n_prediction_rows, avail_words + avail_preds, n_concepts, "--n-concepts",
              "rows", "--fit-max-words and --fit-max-predictions")])
    notes = []
    for what, rows, avail, k, flag, kind, cap in sets:
        if k <= 0 or rows / k >= min_rows:
            continue
        if avail > rows:
            limit = (f"the fit set's budget kept {rows:,} of {avail:,} {kind}; raise {cap} (up to {avail:,}) or "
                     f"pass {flag} {suggested_count(rows)}")
        else:
            limit = (f"the train texts give no more {kind} (at most 20 a word type seen at least 5 times)"
                     if kind == "word rows" else f"the train texts give no more {kind}")
            limit += f"; pass {flag} {suggested_count(rows)}"
        notes.append(f"{k} {what} on {rows:,} fit rows is {rows / k:.1f} rows a concept on average (fewer than "
                     f"{min_rows}): {limit} for about {SUGGESTED_ROWS_PER_CONCEPT} rows a concept.")
    return notes
