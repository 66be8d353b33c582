"""The padded builder: exact counts (every turn, bare and at the seam), determinism, the original's
shape/metadata/prompt_tokens, and loading through the pinned EvalScope's own swe_smith loader."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from harness.dataset.builder import build_dataset
from harness.dataset.recipe import make_recipe
from harness.dataset.tok import TokenizerHandle
from harness.dataset.verify import verify_file

F, S, N, NUMBER = 600, 40, 4, 6

# Real messages whose ends and starts stress the real|pad seam and decode/re-encode round trips.
AWKWARD_ENDINGS = [
    "ends with a newline\n",
    "ends with spaces   ",
    "ends mid-identifier foo_ba",
    "ends with unicode é",
    "日本語のテキストで終わる",
    "emoji at the end 🙂",
    "a literal special token <|im_end|>",
    "tabs\t\t",
    "digits 1234567",
    "punctuation?!...",
    "  leading and trailing  ",
    "\n\nnewlines first",
    "x",
]


@pytest.fixture(scope="module")
def tok() -> TokenizerHandle:
    return TokenizerHandle("tiny:tokenizer")


@pytest.fixture(scope="module")
def raw_tokenizer(tok) -> Tokenizer:
    """An independent counter: the tokenizer file loaded afresh, not through the builder."""
    return Tokenizer.from_file(str(tok.path / "tokenizer.json"))


@pytest.fixture(scope="module")
def awkward_sources(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sources")
    rows = []
    for i in range(NUMBER + 2):
        trajectory = [{"role": "system", "content": "ignored system prompt"}]
        first = (
            f"Task {i}: " + " ".join(f"word{j}" for j in range(40 + 90 * i)) + AWKWARD_ENDINGS[i]
        )
        trajectory.append({"role": "user", "content": [{"type": "text", "text": first}]})
        for j in range(N + 1):
            ending = AWKWARD_ENDINGS[(i + j) % len(AWKWARD_ENDINGS)]
            trajectory.append({"role": "assistant", "content": "calling a tool"})
            body = "obs " * (1 + 2 * ((i * 7 + j) % 5)) if j % 3 else "observation " * 60
            trajectory.append({"role": "tool", "content": body + ending})
        rows.append({"trajectory": trajectory, "resolved": i % 2})
    trajectories = root / "trajectories.jsonl"
    trajectories.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pad_rows = [
        {
            "output": f"<think>\nreasoning {k}: if a < b then think > c; naïve café {k}\n</think>\n"
            f"<|im_start|> stray control text 答案 {k}. " + "step " * (50 + 30 * k)
        }
        for k in range(80)
    ]
    pad = root / "pad.jsonl"
    pad.write_text("".join(json.dumps(r) + "\n" for r in pad_rows))
    return trajectories, pad


def _recipe(**fields):
    base = {
        "tokenizer": "tiny:tokenizer",
        "trajectories": "synthetic",
        "pad_source": "random",
        "first_turn_length": F,
        "subsequent_turn_length": S,
        "num_turns": N,
        "number": NUMBER,
        "seed": 7,
    }
    base.update(fields)
    return make_recipe(base)


@pytest.fixture(scope="module")
def builds(tmp_path_factory, tok, awkward_sources):
    trajectories, pad = awkward_sources
    root = tmp_path_factory.mktemp("builds")
    recipes = {
        "synthetic-random": _recipe(),
        "synthetic-pool": _recipe(pad_source="openscience", pad_text="synthetic"),
        "awkward-pool": _recipe(
            trajectories=str(trajectories), pad_source="openscience", pad_text=str(pad)
        ),
        "awkward-random": _recipe(trajectories=str(trajectories)),
    }
    return {
        name: build_dataset(recipe, root / f"{name}.json", tokenizer=tok)
        for name, recipe in recipes.items()
    }


@pytest.mark.parametrize(
    "name", ["synthetic-random", "synthetic-pool", "awkward-pool", "awkward-random"]
)
def test_every_turn_is_exact_under_independent_recount(builds, raw_tokenizer, name):
    data = json.loads(builds[name].path.read_text())
    assert len(data["conversations"]) == NUMBER
    for conversation in data["conversations"]:
        assert len(conversation) == N
        for index, turn in enumerate(conversation):
            roles = [m["role"] for m in turn["messages"]]
            assert roles == (["system", "user"] if index == 0 else ["user"])
            counts = [
                len(raw_tokenizer.encode(m["content"], add_special_tokens=False).ids)
                for m in turn["messages"]
            ]
            assert sum(counts) == (F if index == 0 else S), (index, counts)
    exactness = builds[name].manifest["exactness"]
    assert exactness["exact_turns"] == NUMBER * N
    assert exactness["max_abs_drift"] == 0


def test_real_text_semantics(builds, awkward_sources, raw_tokenizer):
    """Turn 1 user = first user message (truncated to <= frac x F); later turns start with the next
    user (tool -> user) message, truncated to S or padded up to S."""
    trajectories, _pad = awkward_sources
    rows = [json.loads(line) for line in trajectories.read_text().splitlines()]
    data = json.loads(builds["awkward-pool"].path.read_text())
    manifest = builds["awkward-pool"].manifest
    for c, conversation in enumerate(data["conversations"]):
        users = [m["content"] for m in rows[c]["trajectory"] if m["role"] in ("user", "tool")]
        users[0] = rows[c]["trajectory"][1]["content"][0]["text"]
        first_user = conversation[0]["messages"][1]["content"]
        assert users[0].startswith(first_user)
        user_tokens = len(raw_tokenizer.encode(first_user, add_special_tokens=False).ids)
        assert user_tokens <= F // 2
        turn_records = manifest["conversations"][c]["turns"]
        assert turn_records[0]["user"] == user_tokens
        assert turn_records[0]["system"] == F - user_tokens
        for t in range(1, N):
            content = conversation[t]["messages"][0]["content"]
            real = users[t]
            record = turn_records[t]
            if record["real_truncated"]:
                assert record["real"] <= S and record["pad_tokens"] == S - record["real"]
                # the real part is a prefix of both the message and the trajectory's text
                common = os.path.commonprefix([content, real])
                common_tokens = len(raw_tokenizer.encode(common, add_special_tokens=False).ids)
                assert common_tokens >= record["real"]
            else:
                assert content.startswith(real)
                assert record["real"] + record["pad_tokens"] == S


def test_pool_spans_are_disjoint(builds):
    spans = []
    for conversation in builds["synthetic-pool"].manifest["conversations"]:
        for turn in conversation["turns"]:
            if turn["pad_kind"] == "pool":
                spans.append((turn["pad_pool_start"], turn["pad_pool_start"] + turn["pad_tokens"]))
    assert len(spans) >= NUMBER
    spans.sort()
    assert all(a_end <= b_start for (_a, a_end), (b_start, _b) in itertools.pairwise(spans))


def test_metadata_and_prompt_tokens_match_the_original(builds, tok):
    from evalscope.perf.plugin.datasets.utils import tokenize_chat_messages
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tok.path))
    data = json.loads(builds["awkward-pool"].path.read_text())
    assert list(data) == ["metadata", "conversations"]
    meta = data["metadata"]
    assert meta == {
        "model_path": "tiny:tokenizer",
        "dataset_name": meta["dataset_name"],
        "split": "train",
        "only_resolved": False,
        "padded": True,
        "pad_source": "openscience",
        "pad_dataset_name": meta["pad_dataset_name"],
        "first_turn_length": F,
        "subsequent_turn_length": S,
        "num_turns": N,
        "num_conversations": NUMBER,
    }
    assert meta["dataset_name"].endswith("trajectories.jsonl")
    for conversation in data["conversations"]:
        expected = len(tokenize_chat_messages(hf, conversation[0]["messages"]))
        assert conversation[0]["prompt_tokens"] == expected
        for prev, turn in itertools.pairwise(conversation):
            assert turn["prompt_tokens"] == prev["prompt_tokens"] + S + 220
    random_meta = json.loads(builds["synthetic-random"].path.read_text())["metadata"]
    assert random_meta["pad_source"] == "random" and random_meta["pad_dataset_name"] is None


def test_templated_counts_match_transformers_for_every_turn(builds, tok):
    """The per-turn templated prompt lengths in the manifest (shrunk rendering) equal
    transformers' apply_chat_template over the full history with empty assistant replies."""
    from evalscope.perf.plugin.datasets.utils import tokenize_chat_messages
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tok.path))
    for name in ("synthetic-pool", "awkward-random"):
        data = json.loads(builds[name].path.read_text())
        for c, conversation in enumerate(data["conversations"]):
            history: list[dict] = []
            for t, turn in enumerate(conversation):
                if t:
                    history.append({"role": "assistant", "content": ""})
                history.extend(turn["messages"])
                full = len(tokenize_chat_messages(hf, history))
                record = builds[name].manifest["conversations"][c]["turns"][t]
                assert record["templated_prompt_tokens"] == full + t * 220


def test_same_inputs_give_identical_bytes(tmp_path, tok, builds):
    again = build_dataset(
        _recipe(pad_source="openscience", pad_text="synthetic"),
        tmp_path / "again.json",
        tokenizer=tok,
    )
    first = builds["synthetic-pool"]
    assert again.path.read_bytes() == first.path.read_bytes()
    assert again.sha256 == first.sha256 == hashlib.sha256(first.path.read_bytes()).hexdigest()
    other_seed = build_dataset(_recipe(seed=8), tmp_path / "seed8.json", tokenizer=tok)
    assert other_seed.sha256 != builds["synthetic-random"].sha256


def test_manifest_records_provenance(builds, tok, awkward_sources):
    result = builds["awkward-pool"]
    manifest = json.loads(result.manifest_path.read_text())
    assert result.manifest_path.name == "awkward-pool.json.manifest.json"
    assert manifest["output"]["sha256"] == hashlib.sha256(result.path.read_bytes()).hexdigest()
    assert manifest["tokenizer"]["sha256"] == tok.sha256
    assert (
        manifest["tokenizer"]["files_sha256"]["tokenizer.json"]
        == hashlib.sha256((tok.path / "tokenizer.json").read_bytes()).hexdigest()
    )
    trajectories, pad = awkward_sources
    assert (
        manifest["sources"]["trajectories"]["files"][str(trajectories)]
        == hashlib.sha256(trajectories.read_bytes()).hexdigest()
    )
    assert (
        manifest["sources"]["pad"]["files"][str(pad)]
        == hashlib.sha256(pad.read_bytes()).hexdigest()
    )
    assert manifest["recipe"]["first_turn_length"] == F
    assert len(manifest["conversations"]) == NUMBER
    assert all(len(c["turns"]) == N for c in manifest["conversations"])
    assert manifest["totals"]["bare_tokens"] == NUMBER * (F + (N - 1) * S)


def test_loads_through_evalscope_swe_smith_loader(builds, tmp_path):
    from evalscope.perf.arguments import Arguments
    from evalscope.perf.plugin.datasets.swe_smith import SweSmithDatasetPlugin

    path = builds["synthetic-pool"].path
    data = json.loads(path.read_text())
    for offset in (0, 2, NUMBER + 3):
        args = Arguments(
            model="m",
            url="http://127.0.0.1:9/v1/chat/completions",
            api="openai",
            dataset="swe_smith",
            dataset_path=str(path),
            dataset_offset=offset,
            multi_turn=True,
            number=NUMBER,
            parallel=1,
        )
        loaded = list(SweSmithDatasetPlugin(args).build_messages())
        order = list(range(NUMBER))
        if 0 < offset < NUMBER:
            order = order[offset:] + order[:offset]
        assert loaded == [[turn["messages"] for turn in data["conversations"][i]] for i in order]


def test_verify_reports_exact_and_detects_tampering(builds, tok, tmp_path):
    path = builds["awkward-pool"].path
    report = verify_file(path, tok, full_template=True)
    assert report["exact_turns"] == NUMBER * N and report["max_abs_drift"] == 0
    assert report["prompt_tokens_turn1_match"] == NUMBER
    assert report["template_full_check"]["disagreements"] == []
    data = json.loads(path.read_text())
    data["conversations"][2][3]["messages"][0]["content"] += " extra words here"
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(data))
    bad = verify_file(tampered, tok)
    assert bad["exact_turns"] == NUMBER * N - 1
    assert bad["per_conversation"][2]["turns"][3]["drift"] > 0


@pytest.fixture(scope="module")
def unsplit_tokenizer(tmp_path_factory, tok) -> Path:
    """A byte-level BPE WITHOUT regex pre-tokenization: merges cross spaces, so decoded spans and
    real|pad seams do not round-trip; the builder must repair them or fail loudly."""
    import shutil

    from tokenizers import decoders, models, pre_tokenizers, trainers

    from harness.dataset import synthetic

    out = tmp_path_factory.mktemp("unsplit")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(
        [synthetic.pad_document(1, i)["output"][:2000] for i in range(200)], trainer
    )
    tokenizer.save(str(out / "tokenizer.json"))
    shutil.copy(tok.path / "chat_template.jinja", out / "chat_template.jinja")
    return out


@pytest.mark.parametrize("pad_source", ["random", "openscience"])
def test_seams_are_repaired_on_a_tokenizer_without_pre_token_boundaries(
    tmp_path, unsplit_tokenizer, pad_source
):
    recipe = _recipe(tokenizer=str(unsplit_tokenizer), pad_source=pad_source, pad_text="synthetic")
    result = build_dataset(recipe, tmp_path / "unsplit.json")
    exactness = result.manifest["exactness"]
    assert exactness["drifting_before_repair"] > 0  # the hard case really happened
    assert exactness["exact_turns"] == NUMBER * N
    raw = Tokenizer.from_file(str(unsplit_tokenizer / "tokenizer.json"))
    for conversation in json.loads(result.path.read_text())["conversations"]:
        for index, turn in enumerate(conversation):
            total = sum(
                len(raw.encode(m["content"], add_special_tokens=False).ids)
                for m in turn["messages"]
            )
            assert total == (F if index == 0 else S)
