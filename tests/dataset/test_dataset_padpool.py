"""Pad pool: control-token stripping that keeps ordinary tokens, disjoint exact spans, the
windowed count equals the full count, random pad exactness and reproducibility."""

from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer

from harness.dataset.padpool import PadPool, random_pad, strip_markup
from harness.dataset.tok import TokenizerHandle


@pytest.fixture(scope="module")
def tok() -> TokenizerHandle:
    return TokenizerHandle("tiny:tokenizer")


@pytest.fixture(scope="module")
def think_tok(tmp_path_factory, tok) -> TokenizerHandle:
    """The tiny tokenizer plus `<think>`/`</think>` as single special tokens (as in R1/GLM)."""
    out = tmp_path_factory.mktemp("think-tokenizer")
    backend = Tokenizer.from_file(str(tok.path / "tokenizer.json"))
    backend.add_special_tokens(
        [
            AddedToken("<think>", special=True),
            AddedToken("</think>", special=True),
            AddedToken("[CTRL]", special=True),
        ]
    )
    backend.save(str(out / "tokenizer.json"))
    shutil.copy(tok.path / "tokenizer_config.json", out / "tokenizer_config.json")
    return TokenizerHandle(str(out))


def test_markup_is_replaced_by_a_space():
    text = "a<think>b</ THINK >c<|im_end|>d<｜end▁of▁sentence｜>e < think about it >"
    assert strip_markup(text) == "a b c d e < think about it >"


def test_think_is_not_a_control_id_when_it_is_ordinary_text(tok):
    """The original removed the ids of encode('<think>') even when those are the ordinary '<',
    'think', '>' pieces, deleting them from the whole pool. We strip special ids only."""
    pieces = tok.backend.encode("<think>", add_special_tokens=False).ids
    assert len(pieces) > 1
    assert set(tok.control_ids.tolist()) == {0, 1, 2, 3}  # the four special tokens
    assert not set(pieces) & set(tok.control_ids.tolist())
    pool = PadPool(tok, ["if a < b and we think > c then x<y> holds " * 40], 10_000)
    text = tok.decode(pool.ids)
    assert text.count("<") == 80 and text.count(">") == 80 and text.count("think") == 40
    assert pool.removed_control_ids == 0


def test_think_is_a_control_id_when_it_is_one_special_token(think_tok):
    think = think_tok.backend.token_to_id("<think>")
    end_think = think_tok.backend.token_to_id("</think>")
    controls = set(think_tok.control_ids.tolist())
    assert {think, end_think} <= controls
    lt = think_tok.backend.encode(" <", add_special_tokens=False).ids
    assert not set(lt) & controls
    # Markup spelled out in text is replaced before encoding; nothing ordinary is dropped.
    pool = PadPool(think_tok, ["<think>reasoning a < b</think> answer " * 30], 10_000)
    assert think not in pool.ids and end_think not in pool.ids
    assert think_tok.decode(pool.ids).count("<") == 30


def test_control_ids_in_the_encoding_are_removed_and_marked_as_joins(think_tok):
    """A special token the markup regex does not cover is removed after encoding; the place it
    was is a join (checked by the windowed count) and never a span boundary."""
    ctrl = think_tok.backend.token_to_id("[CTRL]")
    pool = PadPool(think_tok, [("alpha beta gamma delta " * 60 + "x[CTRL]y ") * 20], 10**6)
    assert pool.removed_control_ids == 20
    assert ctrl not in pool.ids
    where = np.flatnonzero(pool.joins[1:-1]) + 1
    assert len(where) == 20
    assert not pool.cuts[where].any()
    piece = pool.take(3000)
    full = len(think_tok.backend.encode(piece.text, add_special_tokens=False).ids)
    assert len(piece.joins) >= 3 and full == 3000
    text, removed = think_tok.windowed(piece.ids, piece.joins)
    assert len(think_tok.backend.encode(text, add_special_tokens=False).ids) + removed == full


def test_spans_are_disjoint_and_each_decodes_to_exactly_its_length(tok):
    from harness.dataset import synthetic

    docs = [synthetic.pad_document(3, i)["output"] for i in range(40)]
    pool = PadPool(tok, docs, 60_000)
    assert pool.documents < 40
    starts, spans = [], []
    for target in [1, 2, 7, 100, 753, 3000, 5, 12_000, 64]:
        piece = pool.take(target)
        assert piece is not None and piece.tokens == target
        assert len(tok.backend.encode(piece.text, add_special_tokens=False).ids) == target
        starts.append(piece.start)
        spans.append((piece.start, piece.start + target))
    assert starts == sorted(starts)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert pool.take(10**7) is None and pool.exhausted_requests == 1


def test_windowed_count_equals_full_count(tok):
    from harness.dataset import synthetic

    awkward = ["naïve café 答案 🙂 done.", "tabs\tand\nnewlines\n\n end", "x" * 300]
    docs = [synthetic.pad_document(5, i)["output"] for i in range(30)] + awkward * 5
    pool = PadPool(tok, docs, 10**9)
    rng = np.random.RandomState(0)
    checked = 0
    for _ in range(40):
        target = int(rng.randint(300, 6000))
        piece = pool.take(target)
        if piece is None:
            break
        windowed = tok.windowed(piece.ids, piece.joins)
        if windowed is None:
            continue
        text, removed = windowed
        full = len(tok.backend.encode(piece.text, add_special_tokens=False).ids)
        assert len(tok.backend.encode(text, add_special_tokens=False).ids) + removed == full
        checked += 1
    assert checked >= 10


def test_random_pad_is_exact_and_reproducible(tok):
    first = [random_pad(tok, np.random.RandomState(42), n).text for n in (1, 33, 5000)]
    again = [random_pad(tok, np.random.RandomState(42), n).text for n in (1, 33, 5000)]
    assert first == again
    for n, text in zip((1, 33, 5000), first, strict=True):
        assert len(tok.backend.encode(text, add_special_tokens=False).ids) == n
    assert random_pad(tok, np.random.RandomState(43), 33).text != first[1]


def test_pool_reads_text_field_from_local_jsonl(tmp_path, tok):
    from harness.dataset.sources import Source, iter_pad_texts

    path = tmp_path / "pad.jsonl"
    path.write_text(
        "".join(json.dumps({"output": f"text {i} " * 50, "x": 1}) + "\n" for i in range(5))
    )
    source = Source(str(path), split="train", revision=None, role="pad text")
    pool = PadPool(tok, iter_pad_texts(source, "output"), 200)
    assert len(pool) >= 200 and pool.documents >= 1
