"""The simulated server: a step-synchronous clock around the scheduler, with a /metrics view.

Loop: schedule() -> step time from the cost model -> advance the clock -> apply the step ->
finished turns hand the client its next request at that instant. When nothing can run (every
waiting request is loading), the clock jumps to the next load completion. Scrapes are taken at
the profile's interval on the virtual clock and report the state during the step they fall in.
The engine persists across the points of a run, as a real server does (prefix caches survive).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Protocol

from harness import metric_names as mn
from harness.client.scrape import Sample
from harness.sim.client import PointClient
from harness.sim.cost import StepStats, step_stats
from harness.sim.request import Request
from harness.sim.residency import Channel, GpuResidency
from harness.sim.scheduler import Scheduler


class StepCost(Protocol):
    def step_time(self, s: StepStats) -> float: ...

    def pcie_bytes_per_s(self) -> float: ...


@dataclass
class PointResult:
    start: float
    end: float
    samples: list[Sample]
    steps: int


class Engine:
    def __init__(
        self,
        scheduler: Scheduler,
        cost: StepCost,
        *,
        topk: int,
        labels: dict[str, str],
        row_bytes: int,
    ) -> None:
        self.scheduler = scheduler
        self.residency: GpuResidency = scheduler.residency
        self.cost = cost
        self.topk = topk
        self.labels = labels
        self.row_bytes = row_bytes
        self.now = 0.0
        self.steps = 0
        self.miss_rate = float(getattr(cost, "miss_rate", 0.0))
        self.hisparse_rows = 0.0
        self.hisparse_misses = 0.0
        self.hisparse_staged = 0.0  # history rows prefills staged from the host
        self.rid_next = 0
        self.frontend_s_per_token = float(getattr(cost, "frontend_us_per_token", 0.0)) * 1e-6
        self.pending: list[tuple[float, int, Request]] = []  # (enters the engine, rid, req)
        # The API server renders and tokenizes each request on a pool of renderer threads, one
        # in vLLM 0.32.0 (config/model.py renderer_num_workers): requests sent together are
        # prepared one after another and reach the engine staggered, not in one step. None:
        # no queue (every request prepared at once).
        threads = getattr(cost, "frontend_threads", None)
        self.frontend_threads = None if threads is None else max(int(threads), 1)
        self._frontend_free: list[float] = []  # when each busy renderer thread is free again
        self.arriving: list[tuple[float, int, Request]] = []  # (sent, rid, req), not yet rendered
        h2d = getattr(self.residency, "h2d", None)
        if isinstance(h2d, Channel):
            h2d.bytes_per_s = cost.pcie_bytes_per_s()
        self.copy_submit_s = float(getattr(cost, "copy_submit_us", 0.0)) * 1e-6
        self.residency.copy_submit_s = self.copy_submit_s
        self._copies_charged = 0
        self._previous_gpu_s = 0.0
        self.submit_stall_s = 0.0  # GPU time lost to the worker's copy submissions, all points

    # ------------------------------------------------------------------ one point
    def run_point(
        self, client: PointClient, scrape_interval: float, max_steps: int = 50_000_000
    ) -> PointResult:
        sched = self.scheduler
        client.rid_base = self.rid_next
        start = self.now
        samples = self._scrape(start)  # the harness scrapes once before the client starts
        for req in client.start(start):
            self.receive(req)
        next_scrape = start + scrape_interval
        steps = 0
        while not client.done:
            self.admit_ready()
            batch = sched.schedule(self.now)
            if not batch and sched.preempted_in_last_schedule:
                continue  # the last running request preempted itself: the next pass admits
            if not batch:
                wakes = [t for t in (sched.next_load_done(), self.next_ready()) if t is not None]
                wake = min(wakes) if wakes else None
                if wake is None or wake <= self.now:
                    raise RuntimeError(
                        f"simulator stalled at t={self.now:.3f}s: nothing runs and nothing "
                        f"loads ({len(sched.waiting)} waiting, {len(sched.running)} running)"
                    )
                while next_scrape <= wake:
                    samples += self._scrape(next_scrape)
                    next_scrape += scrape_interval
                self.now = wake
                self.went_idle()
                continue
            stats = self.step_stats(batch)
            end = self.now + self.step_duration(stats)
            while next_scrape <= end:
                samples += self._scrape(next_scrape)
                next_scrape += scrape_interval
            self.count_host_reads(stats)
            self.now = end
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"simulator exceeded {max_steps} steps in one point")
            for req in sched.update(batch, end):
                nxt = client.on_finish(req, end)
                if nxt is not None:
                    self.receive(nxt)
        samples += self._scrape(self.now)
        self.rid_next = client.rid_base + client._rid
        self.steps += steps
        return PointResult(start, self.now, samples, steps)

    def step_duration(self, stats: StepStats) -> float:
        """The step's GPU time plus what the worker's copy submissions leave exposed.

        The offloading connector's worker submits the step's loads (requests admitted in it) and
        the previous step's stores before launching the forward, at `copy_submit_us` of CPU per
        descriptor. With async scheduling (on by default, MTP included) the worker prepares a
        step while the GPU runs the one before, so only the part of the submission longer than
        that step stalls the GPU (docs/simulator.md §6a, "Copy submission")."""
        gpu = self.cost.step_time(stats)
        copies = self.residency.copies_submitted
        submit = (copies - self._copies_charged) * self.copy_submit_s
        self._copies_charged = copies
        stall = max(0.0, submit - self._previous_gpu_s)
        self._previous_gpu_s = gpu
        self.submit_stall_s += stall
        return gpu + stall

    def went_idle(self) -> None:
        """Nothing ran: submissions made meanwhile cost no GPU time, and the next step's
        preparation overlaps no GPU work."""
        self._copies_charged = self.residency.copies_submitted
        self._previous_gpu_s = 0.0

    def step_stats(self, batch: list[Any]) -> StepStats:
        """A step's work; only the rows of a history not readable on the GPU are copied (the
        residency's missing fraction), offline and over HTTP alike."""
        return step_stats(
            batch,
            topk=self.topk,
            verify_width=self.scheduler.mtp.verify_width,
            missing=self.residency.missing_fraction,
        )

    def count_host_reads(self, stats: StepStats) -> None:
        """HiSparse's hit/miss and host-to-device counters for one step (`counters`)."""
        if stats.hot_rows:
            self.hisparse_rows += stats.hot_rows
            self.hisparse_misses += stats.offloaded_rows * self.miss_rate
        self.hisparse_staged += stats.staged_rows

    def receive(self, req: Request) -> None:
        """The client sent `req` (at `req.arrival`, which a think time may put in the future);
        the engine's queue sees it after the frontend's work."""
        heapq.heappush(self.arriving, (req.arrival, req.rid, req))

    def _render_until(self, t: float) -> None:
        """The renderer threads take requests first come first served, in arrival order: every
        request sent by `t` is known by then (one submitted later arrives later still)."""
        free = self._frontend_free
        while self.arriving and self.arriving[0][0] <= t:
            arrival, rid, req = heapq.heappop(self.arriving)
            begin = arrival
            if self.frontend_threads is not None and len(free) >= self.frontend_threads:
                begin = max(begin, heapq.heappop(free))
            ready = begin + req.prompt * self.frontend_s_per_token
            if self.frontend_threads is not None:
                heapq.heappush(free, ready)
            heapq.heappush(self.pending, (ready, rid, req))

    def admit_ready(self) -> None:
        """Hand the engine every request whose frontend work is done by now."""
        self._render_until(self.now)
        while self.pending and self.pending[0][0] <= self.now:
            self.scheduler.add(heapq.heappop(self.pending)[2])

    def next_ready(self) -> float | None:
        """The next time something reaches the frontend or leaves it for the engine."""
        times = [queue[0][0] for queue in (self.pending, self.arriving) if queue]
        return min(times) if times else None

    # ------------------------------------------------------------------ metrics
    def gauges(self) -> dict[str, float]:
        sched, pool = self.scheduler, self.residency.pool
        out = {
            mn.NUM_REQUESTS_RUNNING: float(len(sched.running)),
            mn.NUM_REQUESTS_WAITING: float(len(sched.waiting)),
            mn.KV_CACHE_USAGE_PERC: pool.used / pool.capacity,
        }
        out.update(self.residency.gauges())
        return out

    def counters(self) -> dict[str, float]:
        c = self.scheduler.counters
        out: dict[str, float] = {
            mn.total(mn.NUM_PREEMPTIONS): c.preemptions,
            mn.total(mn.PREFIX_CACHE_QUERIES): c.prefix_queries,
            mn.total(mn.PREFIX_CACHE_HITS): c.prefix_hits,
            mn.total(mn.PROMPT_TOKENS): c.prompt_tokens,
            mn.total(mn.GENERATION_TOKENS): c.generation_tokens,
            mn.total(mn.REQUEST_SUCCESS): c.finished,
        }
        if self.scheduler.mtp.spec_tokens:
            out[mn.total(mn.SPEC_DECODE_NUM_DRAFTS)] = c.drafts
            out[mn.total(mn.SPEC_DECODE_NUM_DRAFT_TOKENS)] = c.draft_tokens
            out[mn.total(mn.SPEC_DECODE_NUM_ACCEPTED_TOKENS)] = c.accepted
        h2d = getattr(self.residency, "h2d", None)
        if self.residency.name == "offload":
            out[mn.total(mn.KV_OFFLOAD_LOAD_BYTES)] = h2d.bytes_total if h2d else 0
            out[mn.total(mn.KV_OFFLOAD_STORE_BYTES)] = getattr(self.residency, "stored_bytes", 0)
        if self.residency.name == "hisparse":
            misses = round(self.hisparse_misses)
            out[mn.total(mn.HISPARSE_CACHE_HITS)] = round(self.hisparse_rows) - misses
            out[mn.total(mn.HISPARSE_CACHE_MISSES)] = misses
            # Both cross PCIe host to device: decode's top-K misses and the rows a prefill
            # stages because the pool reused their pages (a session back from a pause).
            staged = round(self.hisparse_staged)
            out[mn.total(mn.HISPARSE_HOST_TO_DEVICE_BYTES)] = (misses + staged) * self.row_bytes
        return out

    def histogram_sums(self) -> dict[str, float]:
        """vLLM's request inference-time histogram as a scrape reads it (sum and count): the
        engine's own time, from which a point's engine occupancy is derived (docs/metrics.md)."""
        c = self.scheduler.counters
        name = mn.REQUEST_INFERENCE_TIME_SECONDS
        return {mn.hist_sum(name): c.inference_s, mn.hist_count(name): float(c.finished)}

    def _scrape(self, t: float) -> list[Sample]:
        values: dict[str, Any] = {**self.gauges(), **self.histogram_sums(), **self.counters()}
        return [Sample(t, t, name, dict(self.labels), float(v)) for name, v in values.items()]
