"""The tiny deterministic tokenizer: byte-level BPE trained on local stdlib sources, ChatML template.

Built with `tokenizers` + json only (no transformers, no torch), so it runs in the harness venv,
and the output loads with `transformers.AutoTokenizer` and in vLLM. The training text is the
first 200 sorted `*.py` files of the running interpreter's standard library, which is always on
disk; the stdlib differs across Python versions, so the provenance file records the version and
a hash of the training files.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from harness.results import atomic_write_text

VOCAB_SIZE = 2048
MIN_FREQUENCY = 2
NUM_TRAINING_FILES = 200
MODEL_MAX_LENGTH = 4096

BOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|pad|>"
# Order fixes the ids: 0 bos, 1 im_start, 2 eos, 3 pad.
SPECIAL_TOKENS = (BOS_TOKEN, IM_START, EOS_TOKEN, PAD_TOKEN)

# ChatML: one `<|im_start|>{role}\n{content}<|im_end|>\n` block per message.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages"})

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "repro_tokenizer.json",
)


def training_files() -> list[Path]:
    """The first NUM_TRAINING_FILES `*.py` files of this interpreter's stdlib, sorted by relative
    path (recursive; installed packages excluded)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    candidates = [
        path
        for path in stdlib.rglob("*.py")
        if not _EXCLUDED_DIRS.intersection(path.relative_to(stdlib).parts)
    ]
    files = sorted(candidates, key=lambda p: p.relative_to(stdlib).as_posix())[:NUM_TRAINING_FILES]
    if len(files) < NUM_TRAINING_FILES:
        raise RuntimeError(f"only {len(files)} *.py files in the stdlib at {stdlib}")
    return files


def training_files_hash(files: list[Path] | None = None) -> str:
    """sha256 over (name, content) of the training files: the input that determines the output."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    digest = hashlib.sha256()
    for path in files if files is not None else training_files():
        digest.update(path.relative_to(stdlib).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def provenance(files: list[Path] | None = None) -> dict:
    """What the tokenizer's bytes depend on (also the basis of its cache key)."""
    import tokenizers

    return {
        "kind": "repro-tiny-tokenizer",
        "python_version": ".".join(map(str, sys.version_info[:3])),
        "tokenizers_version": tokenizers.__version__,
        "training_files": NUM_TRAINING_FILES,
        "training_files_sha256": training_files_hash(files),
        "builder_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "vocab_size": VOCAB_SIZE,
        "min_frequency": MIN_FREQUENCY,
        "special_tokens": list(SPECIAL_TOKENS),
    }


def _read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _train(files: list[Path]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=MIN_FREQUENCY,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((_read_text(p) for p in files), trainer=trainer)
    return tokenizer


def _tokenizer_config(tokenizer: Tokenizer) -> dict:
    added = {
        str(tokenizer.token_to_id(tok)): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for tok in SPECIAL_TOKENS
    }
    return {
        "added_tokens_decoder": added,
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "additional_special_tokens": [IM_START],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
        # transformers 5 would write "TokenizersBackend", which 4.x cannot load.
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def _dump(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build_tokenizer(out_dir: Path) -> Path:
    """Train the tiny tokenizer and write its files into out_dir (created); returns out_dir.

    Same interpreter stdlib and `tokenizers` version -> byte-identical files.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = training_files()
    tokenizer = _train(files)
    ids = [tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS]
    if ids != list(range(len(SPECIAL_TOKENS))):
        raise RuntimeError(f"special token ids {ids}, expected 0..{len(SPECIAL_TOKENS) - 1}")

    # The library's own serialisation is stable (vocab in id order, merges in rank order).
    atomic_write_text(out_dir / "tokenizer.json", tokenizer.to_str(pretty=True) + "\n")
    atomic_write_text(out_dir / "tokenizer_config.json", _dump(_tokenizer_config(tokenizer)))
    special_map = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": [IM_START],
    }
    atomic_write_text(out_dir / "special_tokens_map.json", _dump(special_map))
    atomic_write_text(out_dir / "chat_template.jinja", CHAT_TEMPLATE)
    info = provenance(files)
    info["vocab_size_trained"] = tokenizer.get_vocab_size()
    info["bos_token_id"], info["eos_token_id"], info["pad_token_id"] = ids[0], ids[2], ids[3]
    atomic_write_text(out_dir / "repro_tokenizer.json", _dump(info))
    for name in TOKENIZER_FILES:  # temp files are created 0600; the cache is meant to be shared
        (out_dir / name).chmod(0o644)
    return out_dir


def tokenizer_hash(tok_dir: Path) -> str:
    """sha256 over the tokenizer files of a directory (used in model cache keys)."""
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256((Path(tok_dir) / name).read_bytes()).digest())
    return digest.hexdigest()


if __name__ == "__main__":  # pragma: no cover - manual use
    print(build_tokenizer(Path(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())))
