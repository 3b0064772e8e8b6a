"""Word alignment on one real tokenizer of each family: WordPiece (MiniLM), byte-level BPE
(SmolLM2, built from its GGUF file), SentencePiece (the Mistral-7B v0.1 tokenizer.model that
mistral-common ships) and SentencePiece built from a GGUF file; the reference split they are
checked against; and the one-sentence refusal of a tokenizer that merges or splits words.

Tokenizers that ship without their model get a one-layer Llama of their vocabulary for `Backbone`:
alignment reads only the tokenizer, so the model never runs.
"""

from __future__ import annotations

import copy
import zipfile

import pytest
from tokenizers import Regex, pre_tokenizers

from tests.conftest import CACHE, write_vocab_gguf
from vqlc_core.data.alignment import (MAX_RATIO, MIN_RATIO, Aligner, alignment_ratio, check_alignment, reference_words,
                                 tokenizer_family)
from vqlc_core.data.backbone import Backbone
from vqlc_core.data.downloads import pip_download
from vqlc_core.data.models import load_tokenizer
from vqlc_core.base.runio import RunError

MISTRAL_COMMON = "mistral-common==1.13.1"  # Apache-2.0; 6.6 MB wheel holding Mistral's tokenizer files
SENTENCE = "The film's pacing isn't great, but the café scenes cost $3.5 million."
CJK = "東京は晴れです。"
REFERENCE = ["The", "film's", "pacing", "isn't", "great", ",", "but", "the", "café", "scenes", "cost", "$", "3",
             ".", "5", "million", "."]
CJK_WORDS = ["東", "京", "は", "晴", "れ", "で", "す", "。"]


def words(tokenizer, text: str) -> list[str]:
    enc = tokenizer([text], return_offsets_mapping=True)
    spans = Aligner(tokenizer).words(enc, 0, text)
    assert all(text[w.start : w.end] == w.word for w in spans)
    return [w.word for w in spans]


def tiny_backbone(tokenizer, name: str) -> Backbone:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2)
    return Backbone(tokenizer, LlamaForCausalLM(cfg), "decoder", "last", max_length=128, name=name)


def check(bb: Backbone, texts: list[str]) -> float:
    """`check_alignment` of a backbone's tokenizer, as the build runs it (the model is never used)."""
    return check_alignment(bb.tokenizer, texts, bb.name, bb.max_length, bb.add_bos)


def _mistral_pieces() -> list:
    """The pieces (piece, score, type) of Mistral-7B v0.1's SentencePiece model."""
    from transformers.convert_slow_tokenizer import import_protobuf

    wheel = pip_download(MISTRAL_COMMON, CACHE / "downloads", "mistral_common-1.13.1-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        proto = import_protobuf().ModelProto.FromString(zf.read("mistral_common/data/tokenizer.model.v1"))
    assert proto.trainer_spec.model_type == 2  # BPE
    return list(proto.pieces)


@pytest.fixture(scope="module")
def mistral():
    """Mistral-7B v0.1's tokenizer.model as transformers builds it: LlamaTokenizer from the model's
    vocabulary and the merges its scores imply (what AutoTokenizer does with sentencepiece installed)."""
    from transformers import LlamaTokenizer
    from transformers.tokenization_utils_base import generate_merges

    pieces = _mistral_pieces()
    vocab = {p.piece: i for i, p in enumerate(pieces)}
    return LlamaTokenizer(vocab=vocab, merges=generate_merges(vocab, {p.piece: p.score for p in pieces}))


@pytest.fixture(scope="module")
def mistral_gguf(tmp_path_factory):
    """The same vocabulary written into a GGUF file as llama.cpp writes Mistral's (architecture
    llama, tokenizer llama), and the tokenizer transformers builds from it."""
    from transformers import AutoTokenizer

    pieces = _mistral_pieces()
    path = tmp_path_factory.mktemp("gguf") / "mistral-vocab.gguf"
    write_vocab_gguf(path, [p.piece for p in pieces], [p.score for p in pieces], [p.type for p in pieces],
                     name="mistral-7b-v0.1 vocabulary")
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M's byte-level BPE tokenizer, built from its Q4_1 GGUF file."""
    from transformers import AutoTokenizer

    from vqlc_core.data.gguf_files import smollm2_gguf

    path = smollm2_gguf(CACHE)
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def _with_pre_tokenizer(tokenizer, pre_tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizer
    return tok


def test_the_reference_split_keeps_contractions_and_splits_punctuation_numbers_and_cjk():
    assert reference_words(SENTENCE) == REFERENCE
    assert reference_words(CJK) == CJK_WORDS
    assert reference_words("naïve Zoë's résumé — “quoted”") == ["naïve", "Zoë's", "résumé", "—", "“", "quoted", "”"]


def test_wordpiece_words_are_minilms_word_ids_with_contractions_in_three(minilm):
    assert (tokenizer_family(minilm.tokenizer), minilm.aligner.scheme) == ("WordPiece", "word_ids")
    got = words(minilm.tokenizer, SENTENCE)
    assert got == ["The", "film", "'", "s", "pacing", "isn", "'", "t", "great", ",", "but", "the", "café", "scenes",
                   "cost", "$", "3", ".", "5", "million", "."]
    assert len(got) == len(REFERENCE) + 2 * 2  # each contraction is three words
    assert words(minilm.tokenizer, CJK) == CJK_WORDS  # 晴 is an unknown token, and still a word


def test_byte_level_bpe_words_are_smollm2s_word_ids_with_the_clitic_apart(smollm2):
    assert (tokenizer_family(smollm2), Aligner(smollm2).scheme) == ("byte-level BPE", "word_ids")
    got = words(smollm2, SENTENCE)
    assert got == ["The", "film", "'s", "pacing", "isn", "'t", "great", ",", "but", "the", "café", "scenes", "cost",
                   "$", "3", ".", "5", "million", "."]
    assert len(got) == len(REFERENCE) + 2
    assert words(smollm2, CJK) == CJK_WORDS  # byte pieces of one character stay one word


def test_sentencepiece_words_come_from_its_markers_when_word_ids_see_one_word(mistral):
    assert tokenizer_family(mistral) == "SentencePiece (BPE)"
    assert len(set(mistral(SENTENCE).word_ids()) - {None}) == 1  # Metaspace(split=False): no words at all
    assert Aligner(mistral).scheme == "markers"
    assert words(mistral, SENTENCE) == REFERENCE
    assert words(mistral, CJK) == CJK_WORDS


def test_a_sentencepiece_tokenizer_built_from_a_gguf_file_aligns_like_its_tokenizer_model(mistral_gguf, mistral):
    assert len(mistral_gguf) == len(mistral) == 32000
    assert "Metaspace" in repr(mistral_gguf.backend_tokenizer.pre_tokenizer)
    assert (tokenizer_family(mistral_gguf), Aligner(mistral_gguf).scheme) == ("SentencePiece (BPE)", "markers")
    assert words(mistral_gguf, SENTENCE) == REFERENCE
    assert words(mistral_gguf, CJK) == CJK_WORDS


def test_byte_level_words_are_found_from_markers_when_the_split_regex_is_gone(smollm2):
    tok = copy.deepcopy(smollm2)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    assert Aligner(tok).scheme == "markers"
    assert words(tok, SENTENCE) == REFERENCE


@pytest.mark.parametrize("family", ["minilm", "smollm2", "mistral", "mistral_gguf"])
def test_every_family_aligns_about_one_word_per_reference_word_on_mr(family, request, mr_texts):
    fixture = request.getfixturevalue(family)
    bb = fixture if isinstance(fixture, Backbone) else tiny_backbone(fixture, family)
    ratio = check(bb, mr_texts["text"].tolist())
    assert 0.98 < ratio < 1.06
    assert ratio == alignment_ratio(bb.tokenizer, mr_texts["text"].tolist(), bb.max_length, bb.add_bos, sample=200,
                                    seed=0)


def test_a_gguf_tokenizer_read_without_converting_the_weights_aligns_as_the_converted_model(mr_texts, tmp_path):
    from vqlc_core.data.gguf_files import smollm2_gguf

    texts = mr_texts["text"].tolist()
    tok, name, add_bos = load_tokenizer(str(smollm2_gguf(CACHE)), tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # nothing converted, nothing written
    converted, _, converted_bos = load_tokenizer("smollm2-135m", CACHE)  # the converted model's own tokenizer
    assert (name, add_bos) == ("SmolLM2-135M-Instruct.Q4_1", converted_bos)
    assert alignment_ratio(tok, texts, 128, add_bos) == alignment_ratio(converted, texts, 128, converted_bos)


def test_a_text_cut_by_max_length_counts_only_its_covered_words(minilm, mr_texts):
    texts = mr_texts["text"].tolist()
    short = Backbone(minilm.tokenizer, minilm.model, "encoder", "mean", max_length=12, name="minilm")
    assert abs(alignment_ratio(short.tokenizer, texts, 12) - alignment_ratio(minilm.tokenizer, texts, 128)) < 0.03


def test_a_tokenizer_that_takes_each_text_for_one_word_is_refused_in_one_sentence(minilm, mr_texts):
    # Without its pre-tokenizer, WordPiece meets whole sentences and gives one [UNK] per text: the
    # failure the issue saw, every sentence a single "word".
    tok = _with_pre_tokenizer(minilm.tokenizer, pre_tokenizers.Sequence([]))
    bb = Backbone(tok, minilm.model, "encoder", "mean", max_length=128, name="minilm-without-pre-tokenizer")
    _, got = bb.tokenize(["a gorgeous , witty , seductive movie ."])
    assert [w.word for w in got[0]] == ["a gorgeous , witty , seductive movie ."]
    with pytest.raises(RunError) as info:
        check(bb, mr_texts["text"].tolist())
    message = str(info.value)
    assert message.startswith("Model 'minilm-without-pre-tokenizer' finds 0.0")
    assert f"at least {MIN_RATIO:.2f} needed" in message and "merges words" in message
    assert "pick another model, or report this tokenizer family" in message
    assert "\n" not in message and ". " not in message and message.endswith(".")


def test_a_tokenizer_that_splits_words_into_characters_is_refused(minilm, mr_texts):
    tok = _with_pre_tokenizer(minilm.tokenizer, pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex("."), behavior="isolated")]))
    bb = Backbone(tok, minilm.model, "encoder", "mean", max_length=128, name="minilm-by-characters")
    with pytest.raises(RunError, match=rf"splits words apart") as info:
        check(bb, mr_texts["text"].tolist())
    assert f"at most {MAX_RATIO:.2f} needed" in str(info.value)
    assert alignment_ratio(bb.tokenizer, mr_texts["text"].tolist(), bb.max_length) > 3
