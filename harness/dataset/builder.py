"""The padded multi-turn OpenHands builder (recipe.md §6), exact to the token.

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
- A sidecar manifest records sources, tokenizer hashes, per-turn counts (bare and templated),
  seam drift, timings and the output's sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness import __version__ as harness_version
from harness.dataset.padpool import PadPiece, PadPool, random_pad
from harness.dataset.recipe import Recipe
from harness.dataset.sources import Source, collect_conversations, iter_pad_texts
from harness.dataset.tok import TokenizerHandle
from harness.errors import DatasetError

BUILDER_VERSION = "repro-dataset/1"
MANIFEST_SCHEMA = "repro.dataset-manifest/1"
MAX_REPAIRS = 4
REPAIR_SLACK = 8  # a repair tries pad lengths within +-8 tokens of the corrected target
# A prefix of this many characters per wanted token is encoded before the whole message.
_PREFIX_CHARS_PER_TOKEN = (4, 16)


def manifest_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".manifest.json")


@dataclass
class Piece:
    """A real (trajectory) text cut to at most `limit` tokens."""

    text: str
    tokens: int
    real_tokens: int | None  # full bare length when known (None: longer than what was encoded)
    truncated: bool
    ids: np.ndarray


@dataclass
class TurnPlan:
    real: Piece
    pad: PadPiece | None = None
    counts: dict[str, int] = field(default_factory=dict)
    repairs: int = 0
    first_drift: int = 0


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


def _turn_messages(turn: int, plan: TurnPlan) -> list[dict[str, str]]:
    pad = plan.pad.text if plan.pad else ""
    if turn == 1:
        return [{"role": "system", "content": pad}, {"role": "user", "content": plan.real.text}]
    return [{"role": "user", "content": plan.real.text + pad}]


def _repair(
    tok: TokenizerHandle, vendor: _PadVendor, plan: TurnPlan, c: int, turn: int, target: int
) -> None:
    """Re-vend a drifting turn's pad: a fresh span with some slack, then the prefix length whose
    re-tokenized turn total is exact (seams on tokenizers without clean pre-token boundaries)."""
    drift = plan.counts["total"] - target
    want = max(0, (plan.pad.tokens if plan.pad else 0) - drift)
    reserve = vendor.take(c, turn, want + REPAIR_SLACK)
    lengths = [want + d for k in range(REPAIR_SLACK + 1) for d in ((k,) if k == 0 else (-k, k))]
    lengths = [n for n in lengths if 0 <= n <= reserve.tokens]
    pads = [tok.decode(reserve.ids[:n]) if reserve.ids is not None else "" for n in lengths]
    if turn == 1:
        fixed = plan.counts["user"]
        totals = [fixed + n for n in tok.count(pads)]
    else:
        totals = tok.count([plan.real.text + pad for pad in pads])
    best = next((i for i, total in enumerate(totals) if total == target), 0)
    n = lengths[best]
    ids = reserve.ids[:n] if reserve.ids is not None else None
    joins = reserve.joins[reserve.joins < n] if reserve.joins is not None else None
    plan.pad = PadPiece(pads[best], n, reserve.kind, reserve.start, ids, joins)
    plan.repairs += 1


def _construction_ids(turn: int, plan: TurnPlan) -> list[np.ndarray | None]:
    """The ids each message was built from (used only to shrink long contents for the
    templated count, which is cross-checked against a full render)."""
    pad_ids = plan.pad.ids if plan.pad is not None and plan.pad.ids is not None else None
    if turn == 1:
        return [pad_ids if plan.pad and plan.pad.tokens else None, plan.real.ids]
    if pad_ids is None or not plan.pad or plan.pad.tokens == 0:
        return [plan.real.ids]
    return [np.concatenate([plan.real.ids, pad_ids])]


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


@dataclass
class BuildResult:
    path: Path
    manifest_path: Path
    sha256: str
    manifest: dict[str, Any]


def build_dataset(
    recipe: Recipe,
    output: Path,
    *,
    tokenizer: TokenizerHandle | None = None,
    echo: Callable[[str], None] = lambda _msg: None,
) -> BuildResult:
    """Build the dataset described by `recipe` into `output` (+ sidecar manifest), atomically."""
    started = time.perf_counter()
    timings: dict[str, float] = {}

    cpu_times: dict[str, float] = {}
    cpu_mark = [time.process_time()]

    def lap(name: str, since: float) -> float:
        now, cpu = time.perf_counter(), time.process_time()
        timings[name] = round(now - since, 3)
        cpu_times[name] = round(cpu - cpu_mark[0], 3)  # all threads of this process
        cpu_mark[0] = cpu
        echo(f"  {name}: {now - since:.1f}s (CPU {cpu_times[name]:.1f}s)")
        return now

    output = Path(output).expanduser()
    _check_output_path(output)
    tok = tokenizer or TokenizerHandle(recipe.tokenizer, recipe.tokenizer_revision)
    F, S, N = recipe.first_turn_length, recipe.subsequent_turn_length, recipe.num_turns
    cap = max(1, int(F * recipe.max_real_first_turn_frac))
    t = lap("tokenizer", started)

    # 1. Trajectories -> user messages of the first `number` usable rows, in source order.
    trajectories = Source(
        recipe.trajectories,
        split=recipe.split,
        revision=recipe.trajectories_revision,
        role="trajectories",
        seed=recipe.seed,
    )
    conversations, scan = collect_conversations(
        trajectories,
        number=recipe.number,
        only_resolved=recipe.only_resolved,
        max_rows=recipe.max_rows,
    )
    t = lap("trajectories", t)

    # 2. Real pieces: first message capped at frac x F, later ones at S (exact cuts).
    texts: list[str] = []
    limits: list[int] = []
    for messages in conversations:
        texts.append(messages[0])
        limits.append(min(cap, F))
        for turn in range(2, N + 1):
            texts.append(messages[turn - 1] if turn - 1 < len(messages) else "")
            limits.append(S)
    pieces = iter(_cut_real(tok, texts, limits))
    plans: list[list[TurnPlan]] = [
        [TurnPlan(next(pieces)) for _turn in range(N)] for _conv in conversations
    ]
    t = lap("real_text", t)

    # 3. Pad: one pool collected for exactly what the turns need (+ margin), vended in order.
    targets = [
        (F if turn == 0 else S) - plan.real.tokens
        for conv in plans
        for turn, plan in enumerate(conv)
    ]
    needed = int(sum(targets))
    pool = None
    pad_provenance: dict[str, Any] = {"source": recipe.pad_source}
    if recipe.pad_source == "openscience":
        pad_src = Source(
            recipe.pad_text,
            split=recipe.pad_split,
            revision=recipe.pad_revision,
            role="pad text",
            seed=recipe.seed,
        )
        pool = PadPool(
            tok, iter_pad_texts(pad_src, recipe.pad_text_field), needed + needed // 50 + 4096
        )
        pad_provenance.update(pad_src.provenance(), field=recipe.pad_text_field)
    vendor = _PadVendor(tok, recipe, pool)
    for c, conv in enumerate(plans):
        for turn, plan in enumerate(conv, start=1):
            plan.pad = vendor.take(c, turn, (F if turn == 1 else S) - plan.real.tokens)
    t = lap("pad", t)

    # 4. Verify every message by re-tokenizing it; repair drifting seams by re-vending the pad.
    flat: list[tuple[int, int]] = [(c, turn) for c in range(len(plans)) for turn in range(1, N + 1)]

    full_check = recipe.verify == "full" or not tok.splits_locally
    verify_mode = "full" if full_check else "windows"
    if recipe.verify == "windows" and not tok.splits_locally:
        verify_mode = "full (the tokenizer has no local pre-tokenizer split)"

    def pad_text_for_count(plan: TurnPlan) -> tuple[str, int]:
        pad = plan.pad
        if pad is None or not pad.tokens:
            return "", 0
        shrunk = None if full_check or pad.ids is None else tok.windowed(pad.ids, pad.joins)
        return shrunk if shrunk is not None else (pad.text, 0)

    def measure(keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
        batch: list[str] = []
        removed: list[int] = []
        for c, turn in keys:
            plan = plans[c][turn - 1]
            pad_text, pad_removed = pad_text_for_count(plan)
            if turn == 1:
                batch += [pad_text, plan.real.text]
                removed += [pad_removed, 0]
            else:
                batch.append(plan.real.text + pad_text)
                removed.append(pad_removed)
        counts = iter([n + r for n, r in zip(tok.count(batch), removed, strict=True)])
        drifting = []
        for c, turn in keys:
            plan = plans[c][turn - 1]
            if turn == 1:
                system, user = next(counts), next(counts)
                plan.counts = {"system": system, "user": user}
                total, target = system + user, F
            else:
                total, target = next(counts), S
                plan.counts = {"real": plan.real.tokens, "pad": plan.pad.tokens if plan.pad else 0}
            plan.counts["total"] = total
            if total != target:
                if plan.repairs == 0:
                    plan.first_drift = total - target
                drifting.append((c, turn))
        return drifting

    drifting = measure(flat)
    initial_drifting = len(drifting)
    for _attempt in range(MAX_REPAIRS):
        if not drifting:
            break
        for c, turn in drifting:
            _repair(tok, vendor, plans[c][turn - 1], c, turn, F if turn == 1 else S)
        drifting = measure(drifting)
    t = lap("verify", t)
    worst = []
    for c, turn in flat:
        plan = plans[c][turn - 1]
        drift = plan.counts["total"] - (F if turn == 1 else S)
        if abs(drift) > recipe.tolerance:
            worst.append(
                f"conversation {c} turn {turn}: {plan.counts['total']} tokens ({drift:+d})"
            )
    if worst:
        raise DatasetError(
            f"{len(worst)} turns miss their token target beyond tolerance {recipe.tolerance} "
            f"after re-tokenization (nothing written): " + "; ".join(worst[:5])
        )

    # 5. Templated lengths: turn 1 as the original's prompt_tokens, and every turn's prompt with
    #    empty assistant replies (+ output_tokens_estimate per reply, as EvalScope would see it).
    histories: list[tuple[list[dict[str, Any]], list[np.ndarray | None]]] = []
    for conv in plans:
        messages: list[dict[str, Any]] = []
        ids_so_far: list[np.ndarray | None] = []
        for turn, plan in enumerate(conv, start=1):
            if turn > 1:
                messages = [*messages, {"role": "assistant", "content": ""}]
                ids_so_far = [*ids_so_far, None]
            messages = messages + _turn_messages(turn, plan)
            ids_so_far = ids_so_far + _construction_ids(turn, plan)
            histories.append((messages, ids_so_far))
    templated = tok.templated_lengths(histories, window=8)
    templated_method = "shrunk"
    if plans:  # cross-check the shrinking shortcut on the first conversation's first turn
        full = tok.templated_lengths([histories[0]], full=True)[0]
        if full != templated[0]:
            templated_method = (
                f"full (shrunk gave {templated[0]}, full {full} on conversation 0 turn 1)"
            )
            templated = tok.templated_lengths(histories, full=True)
    t = lap("templated", t)

    # 6. Output in the original's shape (EvalScope swe_smith JSON), then the manifest.
    osl = recipe.output_tokens_estimate
    out_conversations = []
    per_conversation = []
    for c, conv in enumerate(plans):
        turns_out = []
        turn_records = []
        prompt_tokens = 0
        for turn, plan in enumerate(conv, start=1):
            prompt_tokens = templated[c * N] if turn == 1 else prompt_tokens + S + osl
            turns_out.append(
                {"messages": _turn_messages(turn, plan), "prompt_tokens": prompt_tokens}
            )
            record: dict[str, Any] = {
                "turn": turn,
                **plan.counts,
                "real_tokens": plan.real.real_tokens,
                "real_truncated": plan.real.truncated,
                "pad_tokens": plan.pad.tokens if plan.pad else 0,
                "pad_kind": plan.pad.kind if plan.pad else "none",
                "pad_pool_start": plan.pad.start if plan.pad else None,
                "seam_drift_before_repair": plan.first_drift,
                "repairs": plan.repairs,
                "templated_prompt_tokens": templated[c * N + turn - 1] + (turn - 1) * osl,
            }
            turn_records.append(record)
        out_conversations.append(turns_out)
        per_conversation.append(
            {
                "index": c,
                "bare_tokens": sum(r["total"] for r in turn_records),
                "first_turn_templated": templated[c * N],
                "last_turn_templated": turn_records[-1]["templated_prompt_tokens"],
                "turns": turn_records,
            }
        )
    metadata = {
        "model_path": recipe.tokenizer,
        "dataset_name": recipe.trajectories,
        "split": recipe.split,
        "only_resolved": bool(recipe.only_resolved),
        "padded": True,
        "pad_source": recipe.pad_source,
        "pad_dataset_name": recipe.pad_text if recipe.pad_source == "openscience" else None,
        "first_turn_length": F,
        "subsequent_turn_length": S,
        "num_turns": N,
        "num_conversations": len(out_conversations),
    }
    payload = json.dumps(
        {"metadata": metadata, "conversations": out_conversations}, indent=2, ensure_ascii=False
    ).encode("utf-8")
    sha256 = hashlib.sha256(payload).hexdigest()
    t = lap("serialize", t)

    first = [p["first_turn_templated"] for p in per_conversation]
    last = [p["last_turn_templated"] for p in per_conversation]
    total_bare = sum(p["bare_tokens"] for p in per_conversation)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "builder_version": BUILDER_VERSION,
        "harness_version": harness_version,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "output": {"path": str(output), "sha256": sha256, "bytes": len(payload)},
        "recipe": recipe.model_dump(),
        "recipe_fingerprint": recipe.fingerprint(),
        "tokenizer": tok.identity(),
        "sources": {"trajectories": {**trajectories.provenance(), **scan}, "pad": pad_provenance},
        "pad": {
            **(pool.stats() if pool else {}),
            "needed_tokens": needed,
            "random_fallbacks": len(vendor.fallbacks),
            "random_fallback_turns": [list(x) for x in vendor.fallbacks[:200]],
        },
        "exactness": {
            "tolerance": recipe.tolerance,
            "verify": verify_mode,
            "turns": len(flat),
            "exact_turns": sum(
                1
                for c, turn in flat
                if plans[c][turn - 1].counts["total"] == (F if turn == 1 else S)
            ),
            "drifting_before_repair": initial_drifting,
            "max_abs_drift": max(
                (
                    abs(plans[c][turn - 1].counts["total"] - (F if turn == 1 else S))
                    for c, turn in flat
                ),
                default=0,
            ),
        },
        "totals": {
            "bare_tokens": total_bare,
            "budget": recipe.pad_budget(),
            "first_turn_templated": _stats(first),
            "last_turn_templated": _stats(last),
            "templated_method": templated_method,
            "assistant_reply_tokens_assumed": osl,
        },
        "conversations": per_conversation,
        "timings_s": timings,
        "cpu_s": cpu_times,
    }
    _atomic_write_bytes(output, payload)
    manifest_file = manifest_path_for(output)
    _atomic_write_bytes(manifest_file, (json.dumps(manifest, indent=1) + "\n").encode())
    timings["write"] = round(time.perf_counter() - t, 3)
    timings["total"] = round(time.perf_counter() - started, 3)
    echo(
        f"wrote {output} ({len(out_conversations)} conversations x {N} turns, {total_bare:,} bare "
        f"tokens, {manifest['exactness']['exact_turns']}/{len(flat)} turns exact, "
        f"{len(vendor.fallbacks)} random fallbacks) in {timings['total']:.1f}s; "
        f"sha256 {sha256[:16]}"
    )
    if first:
        echo(
            f"prompt_tokens turn 1 min/max/mean {min(first)}/{max(first)}/{np.mean(first):.1f}; "
            f"turn {N} {min(last)}/{max(last)}/{np.mean(last):.1f}"
        )
    return BuildResult(output, manifest_file, sha256, manifest)


def _stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": min(values), "max": max(values), "mean": round(float(np.mean(values)), 2)}
