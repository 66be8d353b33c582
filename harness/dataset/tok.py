"""Tokenizer access for exact counting: the `tokenizers` fast backend plus the chat template.

Loads tokenizer-only files (tokenizer.json, tokenizer_config.json, chat_template.jinja), so GLM
DSA model configs that strict transformers validation rejects never get in the way. Chat
templates are rendered with jinja2 in the same sandbox settings transformers uses.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from harness.errors import DatasetError

TOKENIZER_FILE_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
)
HUB_PATTERNS = [*TOKENIZER_FILE_NAMES, "*.tiktoken", "tokenizer.model", "vocab.json", "merges.txt"]


def resolve_tokenizer_dir(spec: str, revision: str | None = None) -> tuple[Path, str]:
    """(local directory, kind) for `tiny:tokenizer`, a local dir/tokenizer.json, or a hub id."""
    if spec.startswith("tiny:"):
        from harness.dataset.tiny import resolve_tokenizer
        from harness.errors import ReproError

        try:
            return resolve_tokenizer(spec), "tiny"
        except ReproError as exc:
            raise DatasetError(f"tokenizer {spec!r}: {exc}") from exc
    path = Path(spec).expanduser()
    if path.is_file() and path.name == "tokenizer.json":
        return path.parent, "local"
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise DatasetError(f"tokenizer directory {path} has no tokenizer.json")
        return path, "local"
    if spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise DatasetError(f"unknown tokenizer {spec!r}: not a local directory nor a hub id")
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(spec, revision=revision, allow_patterns=HUB_PATTERNS)
    except Exception as exc:
        raise DatasetError(
            f"unknown tokenizer {spec!r}: not a local path, and the hub download failed "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            f"pass a local tokenizer directory"
        ) from exc
    if not (Path(local) / "tokenizer.json").is_file():
        raise DatasetError(f"tokenizer {spec!r} has no tokenizer.json (only fast tokenizers)")
    return Path(local), "hub"


def _byte_level_alphabet() -> dict[int, str]:
    """The byte-level BPE byte -> character mapping: printable Latin-1 bytes map to themselves,
    the other bytes to consecutive code points from 256 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def _files_sha256(directory: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
        for name in TOKENIZER_FILE_NAMES
        if (directory / name).is_file()
    }


class TokenizerHandle:
    """A tokenizer for bulk exact counting, slicing and chat-template rendering."""

    def __init__(self, spec: str, revision: str | None = None):
        self.spec = spec
        self.revision = revision
        self.path, self.kind = resolve_tokenizer_dir(spec, revision)
        try:
            self.backend = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        except Exception as exc:  # noqa: BLE001
            raise DatasetError(f"tokenizer {self.path / 'tokenizer.json'} failed to load: {exc}")
        config_file = self.path / "tokenizer_config.json"
        self.config: dict[str, Any] = (
            json.loads(config_file.read_text()) if config_file.is_file() else {}
        )
        self.file_hashes = _files_sha256(self.path)
        self.sha256 = hashlib.sha256(
            json.dumps(self.file_hashes, sort_keys=True).encode()
        ).hexdigest()

    # ------------------------------------------------------------------ identity

    def identity(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "revision": self.revision,
            "kind": self.kind,
            "path": str(self.path),
            "files_sha256": self.file_hashes,
            "sha256": self.sha256,
            "vocab_size": self.backend.get_vocab_size(with_added_tokens=True),
        }

    # ------------------------------------------------------------------ counting

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Bare ids (add_special_tokens=False) of each text, batch-encoded on all cores."""
        if not texts:
            return []
        encodings = self.backend.encode_batch_fast(texts, add_special_tokens=False)
        return [np.asarray(enc.ids, dtype=np.int32) for enc in encodings]

    def count(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(e) for e in self.backend.encode_batch_fast(texts, add_special_tokens=False)]

    def decode(self, ids: np.ndarray | list[int], *, skip_special: bool = True) -> str:
        if len(ids) == 0:
            return ""
        table = self._byte_table
        if table is not None and isinstance(ids, np.ndarray) and len(ids) >= 256:
            pieces = table[ids]
            if not any(piece is None for piece in pieces[self._added_mask[ids]]):
                return b"".join(pieces).decode("utf-8", errors="replace")
        ids_list = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
        return self.backend.decode(ids_list, skip_special_tokens=skip_special)

    @cached_property
    def _added_mask(self) -> np.ndarray:
        mask = np.zeros(self.backend.get_vocab_size(with_added_tokens=True), dtype=bool)
        mask[[int(i) for i in self.backend.get_added_tokens_decoder()]] = True
        return mask

    @cached_property
    def _byte_table(self) -> np.ndarray | None:
        """Per-id bytes for a plain byte-level decoder, so long spans decode by joining bytes
        (several times faster than the backend for multi-million-token pads). None when the
        decoder is anything else or the table disagrees with the backend on a sample."""
        decoder = json.loads(self.backend.to_str()).get("decoder") or {}
        if decoder.get("type") != "ByteLevel":
            return None
        byte_of = {char: byte for byte, char in _byte_level_alphabet().items()}
        size = self.backend.get_vocab_size(with_added_tokens=True)
        table = np.empty(size, dtype=object)
        for i in range(size):
            token = self.backend.id_to_token(i)
            if token is None or self._added_mask[i] or any(c not in byte_of for c in token):
                table[i] = None  # added tokens: the backend decides (skip or keep)
            else:
                table[i] = bytes(byte_of[c] for c in token)
        sample = np.random.RandomState(0).choice(np.flatnonzero(~self._added_mask), 4096)
        joined = b"".join(table[sample]).decode("utf-8", errors="replace")
        if joined != self.backend.decode(sample.tolist(), skip_special_tokens=True):
            return None
        return table

    # ------------------------------------------------------------------ vocabulary facts

    @cached_property
    def _vocab_strings(self) -> list[str]:
        size = self.backend.get_vocab_size(with_added_tokens=True)
        return self.backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)

    @cached_property
    def special_ids(self) -> set[int]:
        """Ids of added tokens flagged special."""
        ids: set[int] = set()
        for tok_id, token in self.backend.get_added_tokens_decoder().items():
            if token.special:
                ids.add(int(tok_id))
        return ids

    @cached_property
    def control_ids(self) -> np.ndarray:
        """Ids stripped from pad text: special ids, added-vocab ids, and `<think>`/`</think>` only
        where each is ONE added/special id (never the ordinary '<', 'think', '>' pieces)."""
        added = {int(i) for i in self.backend.get_added_tokens_decoder()}
        control = set(self.special_ids) | added
        for markup in ("<think>", "</think>"):
            ids = self.backend.encode(markup, add_special_tokens=False).ids
            if len(ids) == 1 and ids[0] in added:
                control.add(ids[0])
        return np.array(sorted(control), dtype=np.int32)

    @cached_property
    def boundary_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts_word, ends_word) per id.

        A cut between ids a|b is a pre-tokenizer boundary (so the text on each side re-encodes
        to the same ids) when `a` ends with a non-space character and `b` starts with one space
        and then a non-space character. Partial UTF-8 pieces and added tokens are never safe.
        """
        strings = self._vocab_strings
        starts = np.zeros(len(strings), dtype=bool)
        ends = np.zeros(len(strings), dtype=bool)
        added = {int(i) for i in self.backend.get_added_tokens_decoder()}
        for i, s in enumerate(strings):
            if i in added or not s or "\ufffd" in s:
                continue
            starts[i] = len(s) >= 2 and s[0] == " " and not s[1].isspace()
            ends[i] = not s[-1].isspace()
        return starts, ends

    def safe_cuts(self, ids: np.ndarray) -> np.ndarray:
        """Boolean array of len(ids)+1: True where a span may start or end at that position."""
        starts, ends = self.boundary_flags
        cuts = np.zeros(len(ids) + 1, dtype=bool)
        if len(ids) == 0:
            return cuts
        cuts[0] = starts[ids[0]]
        cuts[1:-1] = ends[ids[:-1]] & starts[ids[1:]]
        cuts[-1] = ends[ids[-1]]
        return cuts

    @cached_property
    def splits_locally(self) -> bool:
        """True when a regex/whitespace pre-tokenizer splits text into chunks by local rules, so
        tokenization differences can only arise near where separately encoded pieces meet."""
        config = json.loads(self.backend.to_str()).get("pre_tokenizer")

        def splits(node: Any) -> bool:
            if not isinstance(node, dict):
                return False
            kind = node.get("type")
            if kind == "Sequence":
                return any(splits(child) for child in node.get("pretokenizers", []))
            if kind == "ByteLevel":
                return bool(node.get("use_regex", True))
            return kind in {
                "Split",
                "Whitespace",
                "WhitespaceSplit",
                "BertPreTokenizer",
                "Metaspace",
                "Punctuation",
                "Digits",
                "UnicodeScripts",
                "CharDelimiterSplit",
            }

        return splits(config)

    def windowed(
        self, ids: np.ndarray, joins: np.ndarray | None, window: int = 32
    ) -> tuple[str, int] | None:
        """(text, removed): decode(ids) with everything but windows around its ends and `joins`
        cut out at pre-token boundaries, and how many ids were cut. With a locally splitting
        pre-tokenizer, count(text) + removed == count(decode(ids)). None when not worth it."""
        n = len(ids)
        if n <= 8 * window:
            return None
        cut_positions = np.flatnonzero(self.safe_cuts(ids))
        points = [0, n, *(joins.tolist() if joins is not None else [])]
        windows: list[list[int]] = []
        for point in sorted(set(points)):
            start, end = max(0, point - window), min(n, point + window)
            if start > 0:
                k = np.searchsorted(cut_positions, start, side="right") - 1
                start = int(cut_positions[k]) if k >= 0 else 0
            if end < n:
                k = np.searchsorted(cut_positions, end, side="left")
                end = int(cut_positions[k]) if k < len(cut_positions) else n
            if windows and start <= windows[-1][1]:
                windows[-1][1] = max(windows[-1][1], end)
            else:
                windows.append([start, end])
        kept = sum(end - start for start, end in windows)
        if kept * 2 > n:
            return None
        text = "".join(self.decode(ids[start:end]) for start, end in windows)
        return text, n - kept

    @cached_property
    def word_ids(self) -> np.ndarray:
        """Whole-word ids (' ' + ASCII letters) that encode back to themselves alone: any
        sequence of them decodes to text that re-encodes to the same ids."""
        strings = self._vocab_strings
        starts, ends = self.boundary_flags
        candidates = [
            i
            for i, s in enumerate(strings)
            if starts[i] and ends[i] and len(s) >= 3 and s[1:].isascii() and s[1:].isalpha()
        ]
        if not candidates:
            raise DatasetError(f"tokenizer {self.spec!r} has no whole-word tokens for random pad")
        encoded = self.backend.encode_batch_fast(
            [strings[i] for i in candidates], add_special_tokens=False
        )
        words = [i for i, enc in zip(candidates, encoded, strict=True) if enc.ids == [i]]
        if len(words) < 4:
            raise DatasetError(
                f"tokenizer {self.spec!r} has too few stable word tokens ({len(words)})"
            )
        return np.array(words, dtype=np.int32)

    # ------------------------------------------------------------------ chat template

    @cached_property
    def chat_template(self) -> str | None:
        jinja_file = self.path / "chat_template.jinja"
        if jinja_file.is_file():
            return jinja_file.read_text()
        json_file = self.path / "chat_template.json"
        if json_file.is_file():
            return json.loads(json_file.read_text()).get("chat_template")
        template = self.config.get("chat_template")
        if isinstance(template, list):  # named templates: use "default"
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)
        return template

    @cached_property
    def _compiled_template(self):
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        if not self.chat_template:
            raise DatasetError(f"tokenizer {self.spec!r} has no chat template")

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kw: Any):
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kw)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        try:
            return env.from_string(self.chat_template)
        except jinja2.exceptions.TemplateSyntaxError:
            # e.g. `{% generation %}` tags: use transformers' own environment (slower import)
            from transformers.utils.chat_template_utils import _compile_jinja_template

            return _compile_jinja_template(self.chat_template)

    def _special_token_text(self, key: str) -> str | None:
        value = self.config.get(key)
        if isinstance(value, dict):
            return value.get("content")
        return value

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The chat-template text transformers' apply_chat_template(tokenize=False) gives."""
        return self._compiled_template.render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            bos_token=self._special_token_text("bos_token") or "",
            eos_token=self._special_token_text("eos_token") or "",
            pad_token=self._special_token_text("pad_token") or "",
            unk_token=self._special_token_text("unk_token") or "",
        )

    def shrink(
        self, message: dict[str, Any], ids: np.ndarray | None, window: int
    ) -> tuple[dict[str, Any], int]:
        """The message with its content cut to head + tail at pre-tokenizer boundaries, and the
        number of tokens removed. The middle's tokens cannot interact with the template, so a
        templated count of the shrunk message plus the removed count is the full count."""
        if ids is None or len(ids) <= 4 * window:
            return message, 0
        cuts = self.safe_cuts(ids)
        half = len(ids) // 2
        heads = np.flatnonzero(cuts[window:half]) + window
        tails = np.flatnonzero(cuts[half : len(ids) - window]) + half
        if len(heads) == 0 or len(tails) == 0:
            return message, 0
        head, tail = int(heads[0]), int(tails[-1])
        content = self.decode(ids[:head], skip_special=False) + self.decode(
            ids[tail:], skip_special=False
        )
        return {**message, "content": content}, tail - head

    def templated_lengths(
        self,
        conversations: list[tuple[list[dict[str, Any]], list[np.ndarray | None]]],
        *,
        window: int = 16,
        full: bool = False,
    ) -> list[int]:
        """Token counts of the rendered chat template (generation prompt on) of each message list.

        With `full=False` long contents are shrunk (see `shrink`); `full=True` renders and
        encodes every character (slow, for cross-checks).
        """
        texts: list[str] = []
        extra: list[int] = []
        cache: dict[tuple[int, int], tuple[dict[str, Any], int]] = {}
        for messages, ids in conversations:
            if full:
                texts.append(self.render(messages))
                extra.append(0)
                continue
            shrunk, removed = [], 0
            for message, message_ids in zip(messages, ids, strict=True):
                key = (id(message), id(message_ids))  # histories share message objects
                if key not in cache:
                    cache[key] = self.shrink(message, message_ids, window)
                small, middle = cache[key]
                shrunk.append(small)
                removed += middle
            texts.append(self.render(shrunk))
            extra.append(removed)
        return [n + e for n, e in zip(self.count(texts), extra, strict=True)]
