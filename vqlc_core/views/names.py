"""What Explain and Compare call a concept: its id read per method ("VQLC 402", "K-Means 402", so
no two methods seem to share a concept) and a name that says what it carries, its most frequent
members beside its distinctive words ("',', 'and', 'of' — distinctive: engrossing, refreshingly,
exhilarating"): a name of distinctive words alone hides that most members are commas and "and"s.
"""

from __future__ import annotations

from vqlc_core.methods.base import display_name
from vqlc_core.methods.concepts import is_prediction_concept


def method_concept(method: str, k: int) -> str:
    """Concept k of `method` as the pages name it: 'VQLC 402'."""
    return f"{display_name(method)} {int(k)}"


def _quoted(words: list[str]) -> str:
    return ", ".join(f"'{w}'" for w in words)


def carries(cs, k: int, n: int = 3) -> str:
    """What concept k's members are: for a word concept its `n` most frequent member words, then
    those of its `n` most distinctive words (class-based TF-IDF) that are not among them
    ("',', 'and', 'of' — distinctive: engrossing, refreshingly, exhilarating"; the frequent
    words alone when they are the distinctive ones); for a prediction concept its name
    (`ConceptSet.name`: its classes and its sentences' distinctive words)."""
    k = int(k)
    row = cs.summary.loc[k]
    if not int(row["size"]):
        return "(no train members)"
    if is_prediction_concept(row):
        return cs.name(k, n)
    frequent = [w for w, _ in cs.top_words(k, n)]
    distinct = [w for w, _ in cs.distinctive_words(k, n) if w not in frequent]
    if not frequent:
        return ", ".join(distinct) or "(no words)"
    return _quoted(frequent) + (f" — distinctive: {', '.join(distinct)}" if distinct else "")


def concept_title(cs, method: str, k: int, n: int = 3) -> str:
    """Concept k of `method` named for Explain and Compare: its per-method id, the label a person
    or a language model gave it (when it has one), and what its members are (`carries`):
    "VQLC 261: ',', 'and', 'of' — distinctive: engrossing, refreshingly, exhilarating" or
    "VQLC 7: adjectives of praise (',', 'great', 'good' — distinctive: ...)"."""
    k = int(k)
    name = cs.labels.name(k) if getattr(cs, "labels", None) is not None else None
    what = carries(cs, k, n)
    return f"{method_concept(method, k)}: " + (f"{name} ({what})" if name else what)


def tag_badges(line: str) -> list[str]:
    """The tags of a card line ('ADJ (POS) 96% · positive (sentiment) 91% ✓') one per badge."""
    return [t.strip() for t in line.split(" · ") if t.strip()]


def title_of(cs, method: str):
    """A function k -> `concept_title(cs, method, k)`, for `browse.relabel` and `word_labels`."""
    return lambda k: concept_title(cs, method, k)
