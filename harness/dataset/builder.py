"""The padded multi-turn OpenHands builder (docs/recipe.md §6), exact to the token.

Semantics follow the original `build_openhands_padded_dataset.py`: user messages of the first
`number` usable trajectory rows; turn 1 = [system: pad, user: first message truncated to at most
frac x F] with F bare tokens in total; turns 2..N = the next user message (or "") truncated to S
or padded up to S; pad from disjoint spans of one pool (random fallback), or random; metadata
and `prompt_tokens` as the original writes them.

Differences, on purpose:
- Truncation cuts at the last pre-tokenizer boundary at or below the cap (so the kept text
  re-encodes to exactly its ids); turn 1's system pad takes up the few tokens this can leave.
- Pad spans start and end on such boundaries (the cursor skips a few ids to find one), so a
  decoded span re-encodes to exactly its length; the original's decode/re-encode drift is gone.
- `random` pad is uniformly drawn whole-word tokens (exact by construction) instead of random
  characters trimmed by re-tokenization.
- Before writing, every turn is re-tokenized and must hit its target (tolerance 0 by default):
  real text in full, pad spans in windows around every place where separately encoded text
  meets (exact for locally splitting pre-tokenizers, which the tokenizer is checked for; others
  get a full re-tokenization). A drifting seam is repaired by re-vending its pad.
- The encoded pad pool is cached (poolcache.py): a second build with the same pad text,
  tokenizer and shape skips reading and tokenizing it.
- A sidecar manifest records sources, tokenizer hashes, per-turn counts (bare and templated),
  seam drift, the pool cache's status and key, timings and the output's sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import __version__ as harness_version
from harness import env as harness_env
from harness.dataset import output as out
from harness.dataset.exact import Piece, TurnChecker, TurnPlan
from harness.dataset.padpool import PadPiece, PadPool, parallelism, random_pad
from harness.dataset.poolcache import PoolCache, pool_key, source_identity
from harness.dataset.recipe import Recipe
from harness.dataset.sources import Source, collect_conversations, iter_pad_texts
from harness.dataset.tok import TokenizerHandle
from harness.errors import DatasetError

BUILDER_VERSION = "repro-dataset/1"
MANIFEST_SCHEMA = "repro.dataset-manifest/1"
# A prefix of this many characters per wanted token is encoded before the whole message.
_PREFIX_CHARS_PER_TOKEN = (4, 16)
# Set to 0/off/false to build the pad pool without reading or writing the cache.
PAD_CACHE_ENV = "REPRO_PAD_CACHE"

__all__ = ["BUILDER_VERSION", "BuildResult", "build_dataset", "manifest_path_for"]


def manifest_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".manifest.json")


def _cut_real(tok: TokenizerHandle, texts: list[str], limits: list[int]) -> list[Piece]:
    """Each text truncated to its limit at a pre-tokenizer boundary (exact), encoding only a
    prefix of long texts first."""
    pieces: list[Piece | None] = [None] * len(texts)
    todo = list(range(len(texts)))
    for attempt in range(len(_PREFIX_CHARS_PER_TOKEN) + 1):
        if not todo:
            break
        last = attempt == len(_PREFIX_CHARS_PER_TOKEN)
        if last:
            batch = [texts[i] for i in todo]
        else:
            factor = _PREFIX_CHARS_PER_TOKEN[attempt]
            batch = [texts[i][: (limits[i] + 64) * factor] for i in todo]
        encoded = tok.encode(batch)
        retry = []
        for i, prefix, ids in zip(todo, batch, encoded, strict=True):
            whole = len(prefix) == len(texts[i])
            limit = limits[i]
            if not whole and len(ids) < limit + 32:
                retry.append(i)  # the prefix may be too short to hold `limit` reliable tokens
                continue
            if len(ids) <= limit:
                pieces[i] = Piece(texts[i], len(ids), len(ids), False, ids)
                continue
            cuts = tok.safe_cuts(ids)
            candidates = np.flatnonzero(cuts[1 : limit + 1])
            cut = int(candidates[-1]) + 1 if len(candidates) else limit
            text = tok.decode(ids[:cut], skip_special=False)
            pieces[i] = Piece(text, cut, len(ids) if whole else None, True, ids[:cut])
        todo = retry
    return [p for p in pieces if p is not None]


class _PadVendor:
    def __init__(self, tok: TokenizerHandle, recipe: Recipe, pool: PadPool | None):
        self.tok = tok
        self.recipe = recipe
        self.pool = pool
        self.rngs: dict[int, np.random.RandomState] = {}
        self.fallbacks: list[tuple[int, int]] = []

    def take(self, conversation: int, turn: int, target: int) -> PadPiece:
        if self.pool is not None:
            piece = self.pool.take(target)
            if piece is not None:
                return piece
            self.fallbacks.append((conversation, turn))
        rng = self.rngs.get(conversation)
        if rng is None:
            rng = self.rngs[conversation] = np.random.RandomState(self.recipe.seed + conversation)
        return random_pad(self.tok, rng, target)


def _check_output_path(output: Path) -> None:
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"output directory {output.parent} cannot be created: {exc}") from exc
    if output.is_dir():
        raise DatasetError(f"output path {output} is a directory")
    if not os.access(output.parent, os.W_OK | os.X_OK):
        raise DatasetError(f"output directory {output.parent} is not writable")


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _Clock:
    """Wall and CPU (all threads) time per phase."""

    def __init__(self, echo: Callable[[str], None]):
        self.echo = echo
        self.started = self.mark = time.perf_counter()
        self.cpu_mark = time.process_time()
        self.timings: dict[str, float] = {}
        self.cpu_times: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.timings[name] = round(now - self.mark, 3)
        self.cpu_times[name] = round(cpu - self.cpu_mark, 3)
        self.cpu_mark = cpu
        self.echo(f"  {name}: {now - self.mark:.1f}s (CPU {self.cpu_times[name]:.1f}s)")
        self.mark = now


def _real_plans(
    tok: TokenizerHandle, recipe: Recipe, conversations: list[list[str]]
) -> list[list[TurnPlan]]:
    """Real pieces: first message capped at frac x F, later ones at S (exact cuts)."""
    F, S, N = recipe.first_turn_length, recipe.subsequent_turn_length, recipe.num_turns
    cap = max(1, int(F * recipe.max_real_first_turn_frac))
    texts: list[str] = []
    limits: list[int] = []
    for messages in conversations:
        texts.append(messages[0])
        limits.append(min(cap, F))
        for turn in range(2, N + 1):
            texts.append(messages[turn - 1] if turn - 1 < len(messages) else "")
            limits.append(S)
    pieces = iter(_cut_real(tok, texts, limits))
    return [[TurnPlan(next(pieces)) for _turn in range(N)] for _conv in conversations]


def _cache_enabled() -> bool:
    return not harness_env.is_off(PAD_CACHE_ENV)


def recipe_source(recipe: Recipe, role: str) -> Source:
    """The recipe's trajectories or pad-text source (`role` names it in errors)."""
    spec, split, revision = {
        "trajectories": (recipe.trajectories, recipe.split, recipe.trajectories_revision),
        "pad text": (recipe.pad_text, recipe.pad_split, recipe.pad_revision),
    }[role]
    return Source(spec, split=split, revision=revision, role=role, seed=recipe.seed)


def _pool(
    tok: TokenizerHandle, recipe: Recipe, target: int, echo: Callable[[str], None]
) -> tuple[PadPool, dict[str, Any], dict[str, Any]]:
    """The pad pool (from the cache when possible), the pad source's provenance, cache info."""
    pad_src = recipe_source(recipe, "pad text")
    provenance = pad_src.provenance()
    identity = source_identity(pad_src, provenance)
    cache_info: dict[str, Any] = {"status": "off", "key": None, "path": None}
    if not _cache_enabled():
        cache_info["reason"] = f"{PAD_CACHE_ENV} is off"
    elif identity is None:
        cache_info["reason"] = "hub pad source without a pinned revision"
    else:
        key = pool_key(
            identity,
            split=recipe.pad_split,
            field=recipe.pad_text_field,
            tok=tok,
            target_tokens=target,
            builder_version=BUILDER_VERSION,
        )
        cache = PoolCache()
        cache_info.update(key=key, path=str(cache.entry(key)))
        encoded, problem = cache.load(key)
        if encoded is not None:
            cache_info["status"] = "hit"
            echo(f"  pad pool: cache hit {cache.entry(key)}")
            pool = PadPool(tok, [], target, encoded=encoded)
            return pool, {**provenance, "field": recipe.pad_text_field}, cache_info
        if problem:
            cache_info["note"] = f"rebuilt: {problem}"
            cache.discard(key)
        cache_info["status"] = "miss"
    threads = parallelism()
    if threads.startswith("1 thread"):
        echo(f"  pad pool: encoding on {threads}; unset it to use every core")
    pool = PadPool(tok, iter_pad_texts(pad_src, recipe.pad_text_field), target)
    if cache_info["status"] == "miss":
        try:
            PoolCache().store(cache_info["key"], pool.encoded)
        except OSError as exc:  # the cache only saves time: say so, build on
            cache_info["note"] = f"not stored: {exc}"
            echo(f"  pad pool: cache entry not stored ({exc})")
    if pad_src.kind == "hub":
        provenance["served_by"] = pad_src.hub_backend  # known once rows were read
    return pool, {**provenance, "field": recipe.pad_text_field}, cache_info


@dataclass
class _Pad:
    pool: PadPool | None
    vendor: _PadVendor
    needed: int
    provenance: dict[str, Any]
    cache: dict[str, Any] | None


def _pad_turns(
    tok: TokenizerHandle, recipe: Recipe, plans: list[list[TurnPlan]], echo: Callable[[str], None]
) -> _Pad:
    """Pad: one pool collected for exactly what the turns need (+ margin), vended in order."""
    F, S = recipe.first_turn_length, recipe.subsequent_turn_length
    targets = [
        (F if turn == 0 else S) - plan.real.tokens
        for conv in plans
        for turn, plan in enumerate(conv)
    ]
    needed = int(sum(targets))
    pool = None
    cache = None
    provenance: dict[str, Any] = {"source": recipe.pad_source}
    if recipe.pad_source == "openscience":
        pool, source_info, cache = _pool(tok, recipe, needed + needed // 50 + 4096, echo)
        provenance.update(source_info)
    vendor = _PadVendor(tok, recipe, pool)
    for c, conv in enumerate(plans):
        for turn, plan in enumerate(conv, start=1):
            plan.pad = vendor.take(c, turn, (F if turn == 1 else S) - plan.real.tokens)
    return _Pad(pool, vendor, needed, provenance, cache)


@dataclass
class BuildResult:
    path: Path
    manifest_path: Path
    sha256: str
    manifest: dict[str, Any]


def _manifest(
    recipe: Recipe,
    tok: TokenizerHandle,
    output: Path,
    payload: bytes,
    sources: dict[str, Any],
    pad: _Pad,
    checker: TurnChecker,
    per_conversation: list[dict[str, Any]],
    templated_method: str,
) -> dict[str, Any]:
    first = [p["first_turn_templated"] for p in per_conversation]
    last = [p["last_turn_templated"] for p in per_conversation]
    return {
        "schema": MANIFEST_SCHEMA,
        "builder_version": BUILDER_VERSION,
        "harness_version": harness_version,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "output": {
            "path": str(output),
            "sha256": hashlib.sha256(payload).hexdigest(),
            "bytes": len(payload),
        },
        "recipe": recipe.model_dump(),
        "recipe_fingerprint": recipe.fingerprint(),
        "tokenizer": tok.identity(),
        "sources": sources,
        "pad": {
            **(pad.pool.stats() if pad.pool else {}),
            "needed_tokens": pad.needed,
            "random_fallbacks": len(pad.vendor.fallbacks),
            "random_fallback_turns": [list(x) for x in pad.vendor.fallbacks[:200]],
        },
        "pad_cache": pad.cache,
        "exactness": checker.summary(),
        "totals": {
            "bare_tokens": sum(p["bare_tokens"] for p in per_conversation),
            "budget": recipe.pad_budget(),
            "first_turn_templated": out.stats(first),
            "last_turn_templated": out.stats(last),
            "templated_method": templated_method,
            "assistant_reply_tokens_assumed": recipe.output_tokens_estimate,
        },
        "conversations": per_conversation,
    }


def _read_trajectories(recipe: Recipe) -> tuple[Source, list[list[str]], dict[str, int]]:
    """User messages of the first `number` usable rows, in source order."""
    trajectories = recipe_source(recipe, "trajectories")
    conversations, scan = collect_conversations(
        trajectories,
        number=recipe.number,
        only_resolved=recipe.only_resolved,
        max_rows=recipe.max_rows,
    )
    return trajectories, conversations, scan


def _echo_summary(echo: Callable[[str], None], result: BuildResult, clock: _Clock) -> None:
    manifest, N = result.manifest, result.manifest["recipe"]["num_turns"]
    exact, pad = manifest["exactness"], manifest["pad"]
    per_conversation = manifest["conversations"]
    echo(
        f"wrote {result.path} ({len(per_conversation)} conversations x {N} turns, "
        f"{manifest['totals']['bare_tokens']:,} bare tokens, {exact['exact_turns']}/"
        f"{exact['turns']} turns exact, {pad['random_fallbacks']} random fallbacks) in "
        f"{clock.timings['total']:.1f}s; sha256 {result.sha256[:16]}"
    )
    if per_conversation:
        first = [p["first_turn_templated"] for p in per_conversation]
        last = [p["last_turn_templated"] for p in per_conversation]
        echo(
            f"prompt_tokens turn 1 min/max/mean {min(first)}/{max(first)}/{np.mean(first):.1f}; "
            f"turn {N} {min(last)}/{max(last)}/{np.mean(last):.1f}"
        )


def build_dataset(
    recipe: Recipe,
    output: Path,
    *,
    tokenizer: TokenizerHandle | None = None,
    echo: Callable[[str], None] = lambda _msg: None,
) -> BuildResult:
    """Build the dataset described by `recipe` into `output` (+ sidecar manifest), atomically."""
    clock = _Clock(echo)
    output = Path(output).expanduser()
    _check_output_path(output)
    tok = tokenizer or TokenizerHandle(recipe.tokenizer, recipe.tokenizer_revision)
    clock.lap("tokenizer")
    trajectories, conversations, scan = _read_trajectories(recipe)
    clock.lap("trajectories")
    plans = _real_plans(tok, recipe, conversations)
    clock.lap("real_text")
    pad = _pad_turns(tok, recipe, plans, echo)
    clock.lap("pad")
    # Verify every message by re-tokenizing it; repair drifting seams by re-vending the pad.
    checker = TurnChecker(tok, recipe, plans)
    checker.run(pad.vendor.take)
    clock.lap("verify")
    checker.raise_beyond_tolerance()
    templated, templated_method = out.templated_lengths(tok, plans)
    clock.lap("templated")
    payload, per_conversation = out.render(recipe, plans, templated)
    clock.lap("serialize")
    sources = {"trajectories": {**trajectories.provenance(), **scan}, "pad": pad.provenance}
    manifest = _manifest(
        recipe, tok, output, payload, sources, pad, checker, per_conversation, templated_method
    )
    manifest["timings_s"], manifest["cpu_s"] = clock.timings, clock.cpu_times
    manifest_file = manifest_path_for(output)
    # the old sidecar goes first: an interrupt between the two writes leaves new data with no
    # sidecar (rebuilt or refused), never new data beside the old data's checksum
    manifest_file.unlink(missing_ok=True)
    _atomic_write_bytes(output, payload)
    _atomic_write_bytes(manifest_file, (json.dumps(manifest, indent=1) + "\n").encode())
    clock.timings["write"] = round(time.perf_counter() - clock.mark, 3)
    clock.timings["total"] = round(time.perf_counter() - clock.started, 3)
    result = BuildResult(output, manifest_file, manifest["output"]["sha256"], manifest)
    _echo_summary(echo, result, clock)
    return result
