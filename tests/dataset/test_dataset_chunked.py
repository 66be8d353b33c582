"""Word-chunk encoding of pad text: the same ids as whole-document encoding, and a fallback to
whole documents when a tokenizer could merge across spaces."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from harness.dataset import synthetic
from harness.dataset.chunked import WordChunkEncoder, ineligible_reason
from harness.dataset.padpool import PadPool
from harness.dataset.tok import TokenizerHandle

AWKWARD = [
    " naïve café 答案 🙂 done. Ünïcödé  double  spaces and\ttabs\t\tend",
    " lines \n\n with spaces \n around them\n \nand trailing ",
    " numbers 12345 678,90 1.5e-3 -7 and symbols $%^&*() [x] {y} <z>",
    " contractions it's they're we'll I'd   x",
    " " + "x" * 500 + " " + "ab " * 100 + "end",
    " <|im_start|> special text inside <|im_end|> prose",
]


@pytest.fixture(scope="module")
def tok() -> TokenizerHandle:
    return TokenizerHandle("tiny:tokenizer")


def test_word_chunks_give_exactly_the_whole_document_ids(tok):
    assert ineligible_reason(tok) is None
    docs = AWKWARD + [" " + synthetic.pad_document(7, i)["output"].strip() for i in range(12)]
    encoder = WordChunkEncoder(tok)
    ids, starts = encoder.encode(docs)
    whole = tok.encode(docs)
    assert starts.tolist() == np.cumsum([0] + [len(w) for w in whole[:-1]]).tolist()
    assert np.array_equal(ids, np.concatenate(whole))
    assert encoder.check(docs) is None
    # Distinct chunks are encoded once and reused by later batches.
    seen = encoder.distinct_chunks
    again, _ = encoder.encode(docs[::-1])
    assert encoder.distinct_chunks == seen
    assert np.array_equal(again, np.concatenate(whole[::-1]))


# Split patterns of the cl100k / Llama-3 family (digits in threes) and of Qwen2 (single digits).
SPLIT_PATTERNS = {
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


@pytest.mark.parametrize("pattern", sorted(SPLIT_PATTERNS))
def test_word_chunks_are_exact_for_split_regex_tokenizers(tmp_path, pattern):
    """Tokenizers built like the served models' (a Split regex, then byte-level BPE), trained
    here on prose, code and awkward text."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERNS[pattern]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    docs = AWKWARD + [" " + synthetic.pad_document(13, i)["output"].strip() for i in range(8)]
    code = [" " + synthetic.trajectory(13, i)["trajectory"][3]["content"].strip() for i in range(8)]
    trainer = trainers.BpeTrainer(
        vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    backend.train_from_iterator(docs + code, trainer)
    out = tmp_path / pattern
    out.mkdir()
    backend.save(str(out / "tokenizer.json"))
    regex_tok = TokenizerHandle(str(out))
    assert ineligible_reason(regex_tok) is None
    encoder = WordChunkEncoder(regex_tok)
    assert encoder.check(docs + code) is None
    ids, _starts = encoder.encode(docs + code)
    assert np.array_equal(ids, np.concatenate(regex_tok.encode(docs + code)))


def test_documents_must_start_with_a_space_and_text(tok):
    with pytest.raises(ValueError, match="starting with"):
        WordChunkEncoder(tok).encode(["no leading space"])


def test_pool_ids_are_the_same_with_and_without_word_chunks(tok, monkeypatch):
    docs = [synthetic.pad_document(11, i)["output"] for i in range(20)] + AWKWARD
    chunked = PadPool(tok, docs, 10**9)
    assert chunked.encoding == "word chunks" and chunked.distinct_chunks > 100
    monkeypatch.setattr("harness.dataset.padpool.ineligible_reason", lambda _tok: "forced")
    whole = PadPool(tok, docs, 10**9)
    assert whole.encoding == "whole documents" and whole.encoding_note == "forced"
    assert np.array_equal(chunked.ids, whole.ids)
    assert np.array_equal(chunked.joins, whole.joins)
    assert np.array_equal(chunked.cuts, whole.cuts)


def _variant(tok: TokenizerHandle, tmp_path, edit) -> TokenizerHandle:
    config = json.loads((tok.path / "tokenizer.json").read_text())
    edit(config)
    out = tmp_path / "variant"
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps(config))
    shutil.copy(tok.path / "tokenizer_config.json", out / "tokenizer_config.json")
    return TokenizerHandle(str(out))


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (
            lambda c: c.update(
                normalizer={"type": "Strip", "strip_left": True, "strip_right": True}
            ),
            "normalizer Strip",
        ),
        (lambda c: c["added_tokens"][0].update(rstrip=True), "strips whitespace"),
        (lambda c: c["added_tokens"][0].update(content="<| a |>"), "spans or strips"),
        (lambda c: c.update(pre_tokenizer=None), "no local pre-tokenizer"),
    ],
)
def test_tokenizers_that_could_merge_across_spaces_are_not_eligible(tok, tmp_path, edit, reason):
    variant = _variant(tok, tmp_path, edit)
    assert reason in (ineligible_reason(variant) or "")


def test_a_pre_tokenizer_that_merges_across_spaces_falls_back_to_whole_documents(tmp_path):
    """Lines as pre-tokens and BPE merges across spaces: eligible on paper (a Split), so the
    sample check against whole documents must catch it."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    corpus = ["alpha beta gamma delta alpha beta\n"] * 200
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    backend.train_from_iterator(corpus, trainer)
    out = tmp_path / "lines-tokenizer"
    out.mkdir()
    backend.save(str(out / "tokenizer.json"))
    lines = TokenizerHandle(str(out))
    assert ineligible_reason(lines) is None  # nothing in the config forbids it...
    docs = ["alpha beta gamma delta " * 50] * 4
    problem = WordChunkEncoder(lines).check([" " + d.strip() for d in docs])
    assert problem is not None and "differs at token" in problem  # ...the sample does
    pool = PadPool(lines, docs, 10**9)
    assert pool.encoding == "whole documents"
    assert "disagreed with whole documents" in pool.encoding_note
    expected = np.concatenate(lines.encode([" " + d.strip() for d in docs]))
    assert np.array_equal(pool.ids, expected)
