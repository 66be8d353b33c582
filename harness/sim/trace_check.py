"""Check the simulator's scheduler against a real vLLM's, decision by decision.

A CPU server started with the tracing scheduler (`harness/serve/sched_trace.py`) writes every
request it receives, every `schedule()` call and every request that leaves. `check_trace`
feeds the simulator's `Scheduler` the same requests at the same moments (each request enters
between the same two steps as in vLLM, and each step ends when vLLM's did), and compares each
step's batch (tokens per request) and preemptions with vLLM's. Timing is taken from the trace,
so what is tested is the scheduling logic alone: admission, chunking, block growth, the
preemption victim, prefix-cache reuse and when blocks come back. The CPU parity benchmark
judges the rest (speeds and out-of-engine times) separately.

A request's conversation is known by its first block's token ids (the trace's `key`), which is
the prefix-cache identity vLLM hashes; a finished turn leaves its prompt's full blocks reusable
(`parity.ResentResidency`: the next turn re-sends the reply as re-tokenised text). A trace with
block hashes (`blocks` in its `add` and `free` records) says exactly how many leading blocks
a turn shares with its conversation's last finished one: the re-tokenised reply often keeps
its first tokens, and a block holding them then hits too. Which of those blocks are still
cached is the simulator's to decide.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.sim.mtp import Mtp
from harness.sim.parity import ResentResidency
from harness.sim.request import Request
from harness.sim.scheduler import Scheduled, Scheduler

TRACE_VERSION = 1  # harness/data/vllm_side/repro_sched_trace.py TRACE_VERSION
ABORTED = "FINISHED_ABORTED"


@dataclass(frozen=True)
class TraceHeader:
    num_blocks: int
    block_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    prefix_caching: bool
    spec_tokens: int = 0  # num_speculative_tokens (a trace without it: none)


@dataclass(frozen=True)
class TracedMtp(Mtp):
    """Speculative decoding with vLLM's own acceptances: each decode step emits what the
    request received in that step of the trace (`counts`, set before each update)."""

    counts: dict[int, int] = field(default_factory=dict, compare=False)

    def emitted(self, step_index: int, stream: int = 0) -> int:
        return self.counts.get(stream, 1)


@dataclass(frozen=True)
class Divergence:
    step: int  # 1-based index of the schedule() call
    t: float  # vLLM's monotonic time of it
    real: dict[str, int]  # request id -> tokens scheduled
    sim: dict[str, int]
    real_preempted: list[str]
    sim_preempted: list[str]

    def describe(self, names: dict[str, str]) -> str:
        def batch(n: dict[str, int]) -> str:
            return ", ".join(f"{names.get(k, k)}:{v}" for k, v in sorted(n.items())) or "-"

        def pre(ids: list[str]) -> str:
            return ", ".join(names.get(k, k) for k in ids) or "-"

        return (
            f"step {self.step}: vLLM [{batch(self.real)}] preempted [{pre(self.real_preempted)}]; "
            f"simulator [{batch(self.sim)}] preempted [{pre(self.sim_preempted)}]"
        )


@dataclass
class TraceCheck:
    path: Path
    header: TraceHeader
    requests: int = 0
    steps: int = 0
    real_preemptions: int = 0
    sim_preemptions: int = 0
    real_finished: int = 0
    sim_finished: int = 0
    divergent_steps: int = 0
    # with block hashes: later turns, and those sharing more blocks with their conversation's
    # last request than that request's full prompt blocks (its reply's first tokens came back)
    hashed_turns: int = 0
    reply_hits: int = 0
    divergences: list[Divergence] = field(default_factory=list)  # the first `keep`
    names: dict[str, str] = field(default_factory=dict)  # request id -> R<n>, in arrival order

    @property
    def exact(self) -> bool:
        return self.divergent_steps == 0 and self.real_finished == self.sim_finished

    def summary(self) -> str:
        verdict = "identical" if self.exact else f"{self.divergent_steps} divergent"
        return (
            f"{self.path}: {self.requests} requests, {self.steps} steps: {verdict}; "
            f"preemptions vLLM {self.real_preemptions}, simulator {self.sim_preemptions}; "
            f"finished vLLM {self.real_finished}, simulator {self.sim_finished} "
            f"(pool {self.header.num_blocks} blocks of {self.header.block_tokens} tokens, "
            f"max-num-batched-tokens {self.header.max_num_batched_tokens})"
            + (
                f"; block hashes: {self.reply_hits} of {self.hashed_turns} later turns share "
                "a block of their previous turn's reply"
                if self.hashed_turns
                else ""
            )
        )


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    opener = gzip.open if path.suffix == ".gz" else open  # traces compress ~10x
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                # the server was killed while writing: only a last line can be cut short
                if handle.readline():
                    raise ConfigError(f"{path}:{number}: not a JSON line") from None
                return
            if not isinstance(record, dict) or "ev" not in record:
                raise ConfigError(f"{path}:{number}: not a trace record (no 'ev')")
            yield number, record


def read_trace(path: Path | str) -> tuple[TraceHeader, list[dict[str, Any]]]:
    """The header and the events of one server lifetime (the last, if the file holds more)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such scheduler trace")
    header: TraceHeader | None = None
    events: list[dict[str, Any]] = []
    for number, record in _records(path):
        if record["ev"] == "trace":
            if record.get("version") != TRACE_VERSION:
                raise ConfigError(
                    f"{path}:{number}: trace version {record.get('version')!r}; this harness "
                    f"reads version {TRACE_VERSION}"
                )
            try:
                header = TraceHeader(
                    num_blocks=int(record["num_blocks"]),
                    block_tokens=int(record["block_tokens"]),
                    max_num_seqs=int(record["max_num_seqs"]),
                    max_num_batched_tokens=int(record["max_num_batched_tokens"]),
                    prefix_caching=bool(record["prefix_caching"]),
                    spec_tokens=int(record.get("spec_tokens", 0)),
                )
            except KeyError as exc:
                raise ConfigError(f"{path}:{number}: trace header without {exc}") from None
            events = []  # a restarted server starts a new trace
        elif header is None:
            raise ConfigError(f"{path}:{number}: {record['ev']!r} before the trace header")
        else:
            hashes = record.get("blocks", [])
            if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
                raise ConfigError(f"{path}:{number}: 'blocks' is not a list of block hashes")
            events.append(record)
    if header is None:
        raise ConfigError(f"{path}: no trace header (was the server started with the tracer?)")
    return header, events


class _RecordingScheduler(Scheduler):
    """The simulator's scheduler, noting which requests it preempts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.victims: list[Request] = []

    def _preempt(self, req: Request) -> None:
        self.victims.append(req)
        super()._preempt(req)


def _output_lengths(events: list[dict[str, Any]]) -> dict[str, int]:
    """Output tokens of each request that ran to its end (an aborted one stops at the abort)."""
    return {
        e["id"]: int(e["out"]) for e in events if e["ev"] == "free" and e.get("status") != ABORTED
    }


def _drop(sched: Scheduler, req: Request) -> None:
    """An aborted request leaves wherever it is, its blocks freed."""
    if req in sched.running:
        sched.running.remove(req)
    elif req in sched.waiting:
        sched.waiting.remove(req)
    sched.residency.release(req)


def _shared_prefix(a: list[str], b: list[str]) -> int:
    """Leading block hashes two requests have in common."""
    return len(os.path.commonprefix([a, b]))  # element-wise on lists too


def check_trace(path: Path | str, *, keep: int = 20) -> TraceCheck:
    """Replay `path` through the simulator's scheduler; compare every step with vLLM's."""
    path = Path(path)
    header, events = read_trace(path)
    residency = ResentResidency(header.num_blocks - 1, header.block_tokens, header.prefix_caching)
    residency.drop_last_hit_block = header.spec_tokens > 0
    mtp = TracedMtp(header.spec_tokens, float(header.spec_tokens + 1))
    sched = _RecordingScheduler(
        residency,
        max_num_seqs=header.max_num_seqs,
        max_num_batched_tokens=header.max_num_batched_tokens,
        mtp=mtp,
    )
    result = TraceCheck(path, header)
    out_len = _output_lengths(events)
    by_id: dict[str, Request] = {}
    ids: dict[int, str] = {}
    convs: dict[str, int] = {}
    # conv -> (prompt tokens, block hashes) of its last finished request
    last_blocks: dict[int, tuple[int, list[str]]] = {}
    batch: list[Scheduled] = []
    for event in events:
        kind = event["ev"]
        if kind == "add":
            rid = event["id"]
            conv = convs.setdefault(event["key"], len(convs))
            req = Request(
                rid=len(by_id),
                conv=conv,
                turn=0,
                prompt=int(event["prompt"]),
                # a request still running when the trace ends keeps its asked-for length
                max_out=out_len.get(rid, int(event["max"])),
                arrival=float(event["t"]),
            )
            by_id[rid], ids[req.rid] = req, rid
            result.names[rid] = f"R{req.rid}"
            if "blocks" in event and conv in last_blocks:
                last_prompt, last_hashes = last_blocks[conv]
                shared = _shared_prefix(event["blocks"], last_hashes)
                residency.matched[req.rid] = shared
                result.hashed_turns += 1
                result.reply_hits += shared > last_prompt // header.block_tokens
            result.requests += 1
            sched.add(req)
        elif kind == "sched":
            result.steps += 1
            sched.victims.clear()
            batch = sched.schedule(float(event["t0"]))
            sim = {ids[item.req.rid]: item.tokens for item in batch}
            sim_pre = sorted(ids[r.rid] for r in sched.victims)
            real_pre = sorted(event["pre"])
            result.real_preemptions += len(real_pre)
            result.sim_preemptions += len(sim_pre)
            if sim != event["n"] or sim_pre != real_pre:
                result.divergent_steps += 1
                if len(result.divergences) < keep:
                    result.divergences.append(
                        Divergence(
                            result.steps,
                            float(event["t0"]),
                            dict(event["n"]),
                            sim,
                            real_pre,
                            sim_pre,
                        )
                    )
        elif kind == "upd":
            received = event.get("out") or {}
            mtp.counts.clear()
            mtp.counts.update({by_id[k].rid: int(v) for k, v in received.items() if k in by_id})
            result.sim_finished += len(sched.update(batch, float(event["t"])))
            batch = []
        elif kind == "free":
            result.real_finished += 1
            gone = by_id.get(event["id"])
            if gone is not None and "blocks" in event and event.get("status") != ABORTED:
                last_blocks[gone.conv] = (gone.prompt, list(event["blocks"]))
            if event.get("status") == ABORTED and gone is not None and not gone.done:
                _drop(sched, gone)
                batch = [item for item in batch if item.req is not gone]
                result.sim_finished += 1  # both sides let it go here
    return result
