"""The tiny tokenizer: deterministic files, special tokens, ChatML template, cache behaviour."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.dataset.tiny.cache import ensure_entry
from harness.dataset.tiny.tokenizer import (
    CHAT_TEMPLATE,
    TOKENIZER_FILES,
    build_tokenizer,
    training_files,
    training_files_hash,
)
from harness.errors import ConfigError
from harness.serve.tiny import resolve_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def file_hashes(directory: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
        if path.is_file()
    }


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")


@pytest.fixture(scope="module")
def hf_tokenizer(tok_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


def test_two_builds_are_byte_identical(tok_dir: Path, tmp_path: Path) -> None:
    again = build_tokenizer(tmp_path / "again")
    first, second = file_hashes(tok_dir), file_hashes(again)
    assert sorted(first) == sorted(TOKENIZER_FILES)
    assert first == second


def test_training_input_is_the_first_200_stdlib_files_and_is_recorded(tok_dir: Path) -> None:
    files = training_files()
    assert len(files) == 200
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    relative = [f.relative_to(stdlib).as_posix() for f in files]
    assert relative == sorted(relative)
    assert not any("site-packages" in r for r in relative)
    info = json.loads((tok_dir / "repro_tokenizer.json").read_text())
    assert info["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert info["training_files_sha256"] == training_files_hash()
    assert info["vocab_size_trained"] == 2048


def test_special_tokens_and_ids(hf_tokenizer, tok_dir: Path) -> None:
    config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["model_max_length"] == 4096
    tok = hf_tokenizer
    assert (tok.bos_token, tok.bos_token_id) == ("<|endoftext|>", 0)
    assert tok.convert_tokens_to_ids("<|im_start|>") == 1
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 2)
    assert (tok.pad_token, tok.pad_token_id) == ("<|pad|>", 3)
    assert tok.unk_token is None
    assert len(tok) == 2048
    assert tok.model_max_length == 4096
    # A special token in text is one id, never split into bytes.
    assert tok.encode("<|im_start|>user", add_special_tokens=False)[0] == 1


def test_chat_template_renders_chatml_exactly(hf_tokenizer, tok_dir: Path) -> None:
    assert (tok_dir / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "def f(x):\n    return x"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
    ]
    rendered = hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert rendered == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\ndef f(x):\n    return x<|im_end|>\n"
        "<|im_start|>assistant\nok<|im_end|>\n"
        "<|im_start|>user\nagain<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without = hf_tokenizer.apply_chat_template(
        messages[:1], tokenize=False, add_generation_prompt=False
    )
    assert without == "<|im_start|>system\nYou are terse.<|im_end|>\n"


@pytest.mark.parametrize(
    "text",
    [
        "import os\nprint(os.getcwd())\n",
        "  leading and trailing spaces  \n\n\t tabs",
        "héllo wörld — ünïcode ✓ 日本語 🙂",
        "<|im_start|>user\nhi<|im_end|>\n",
        "",
    ],
)
def test_round_trip_encode_decode(hf_tokenizer, text: str) -> None:
    ids = hf_tokenizer.encode(text, add_special_tokens=False)
    assert hf_tokenizer.decode(ids) == text
    assert all(0 <= i < 2048 for i in ids)


def test_bpe_actually_merges(hf_tokenizer) -> None:
    text = "def __init__(self):\n        return self\n"
    assert len(hf_tokenizer.encode(text, add_special_tokens=False)) < len(text.encode()) / 2


def test_resolve_tokenizer_builds_once_into_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPRO_CACHE", str(tmp_path))
    first = resolve_tokenizer("tiny:tokenizer")
    assert first.parent == tmp_path / "tokenizers"
    assert first.name.startswith("tiny-")
    stamps = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    second = resolve_tokenizer("tiny:tokenizer")
    assert second == first
    assert {p.name: p.stat().st_mtime_ns for p in second.iterdir()} == stamps
    leftovers = [p.name for p in first.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def _resolve_in_child(cache: str, queue) -> None:
    os.environ["REPRO_CACHE"] = cache
    queue.put(str(resolve_tokenizer("tiny:tokenizer")))


def test_concurrent_resolves_share_one_build(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    children = [
        context.Process(target=_resolve_in_child, args=(str(tmp_path), queue)) for _ in range(2)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    paths = {queue.get(timeout=5) for _ in children}
    assert len(paths) == 1
    entries = [p for p in (tmp_path / "tokenizers").iterdir() if p.is_dir()]
    assert [p.name for p in entries] == [Path(paths.pop()).name]


def test_resolve_tokenizer_paths_and_errors(tmp_path: Path) -> None:
    assert resolve_tokenizer(str(tmp_path)) == tmp_path
    with pytest.raises(ConfigError, match="does-not-exist"):
        resolve_tokenizer(str(tmp_path / "does-not-exist"))
    with pytest.raises(ConfigError, match="tiny:nope"):
        resolve_tokenizer("tiny:nope")


def test_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    def broken(target: Path) -> None:
        (target / "half-written").write_text("x")
        raise RuntimeError("boom")

    entry = tmp_path / "entry"
    with pytest.raises(RuntimeError, match="boom"):
        ensure_entry(entry, broken)
    assert not entry.exists()
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []


def test_cli_builds_tokenizer_into_out(tmp_path: Path, tok_dir: Path) -> None:
    out = tmp_path / "cli-tok"
    result = CliRunner().invoke(cli, ["model", "build", "tokenizer", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    assert file_hashes(out) == file_hashes(tok_dir)
    again = CliRunner().invoke(cli, ["model", "build", "tokenizer", "--out", str(out)])
    assert again.exit_code != 0
    assert "not an empty directory" in str(again.exception)
