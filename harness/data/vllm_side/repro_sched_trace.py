"""vLLM's own v1 scheduler, recording each decision it makes (runs inside the vLLM build).

This file is imported by the vLLM server process, not by the harness: a profile names it
with `serve.scheduler-cls: repro_sched_trace.TracingScheduler` and puts this folder on the
server's PYTHONPATH (`harness/serve/sched_trace.py` sets both). It imports only vLLM and the
standard library, and changes no decision: every method calls vLLM's and then records.

One JSON object per line in the file named by $REPRO_SCHED_TRACE:
* `{"ev": "trace", "version": 1, ...}` first: the pool and scheduler limits;
* `add`: a request entered the scheduler (`key`: a digest of its first block's token ids,
  the prefix-cache identity of its conversation; `blocks`: the first 6 bytes of each full
  prompt block's prefix-cache hash, so a replay knows which blocks two turns share);
* `sched`: one `schedule()` call: tokens per request (`n`), the requests preempted in it
  (`pre`), and the free blocks after it;
* `free`: a request left (finished or aborted), with its output length and the short hashes of
  all its full blocks, the reply's included (`blocks`);
* `upd`: one `update_from_output()` done (the step's end), with the tokens each request received
  in it (`out`: with speculative decoding, 1 + the drafts accepted).
Times are `time.monotonic()` seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

TRACE_VERSION = 1


def _first_block_key(token_ids: Any, block_tokens: int) -> str:
    head = list(token_ids[:block_tokens])
    return hashlib.sha256(json.dumps(head).encode()).hexdigest()[:16]


def _short_hashes(request: Any) -> list[str]:
    # vLLM keeps one prefix-cache hash per full block of the request's tokens (Request.block_hashes)
    return [bytes(h)[:6].hex() for h in getattr(request, "block_hashes", ())]


class TracingScheduler(Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # open for the server's lifetime, line-buffered: a killed server leaves whole lines
        path = os.environ["REPRO_SCHED_TRACE"]
        self._trace = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._block_tokens = int(self.cache_config.block_size)
        self._write(
            {
                "ev": "trace",
                "version": TRACE_VERSION,
                "num_blocks": int(self.kv_cache_manager.block_pool.num_gpu_blocks),
                "block_tokens": self._block_tokens,
                "max_num_seqs": int(self.max_num_running_reqs),
                "max_num_batched_tokens": int(self.max_num_scheduled_tokens),
                "prefix_caching": bool(self.cache_config.enable_prefix_caching),
                "spec_tokens": int(self.num_spec_tokens or 0),
                "lookahead_tokens": int(self.num_lookahead_tokens or 0),
                "free": self.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
        )

    def _write(self, record: dict[str, Any]) -> None:
        record["t"] = time.monotonic()
        self._trace.write(json.dumps(record, separators=(",", ":")) + "\n")

    def add_request(self, request: Any) -> None:
        super().add_request(request)
        self._write(
            {
                "ev": "add",
                "id": request.request_id,
                "prompt": request.num_prompt_tokens,
                "max": request.max_tokens,
                "key": _first_block_key(request.prompt_token_ids or [], self._block_tokens),
                "blocks": _short_hashes(request),
            }
        )

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        out = super().schedule(*args, **kwargs)
        self._write(
            {
                "ev": "sched",
                "t0": t0,
                "n": out.num_scheduled_tokens,
                "pre": sorted(out.preempted_req_ids or ()),
                "free": self.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
        )
        return out

    def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self._write(
            {
                "ev": "free",
                "id": request.request_id,
                "out": request.num_output_tokens,
                "status": str(request.status.name),
                "blocks": _short_hashes(request),
            }
        )
        return super()._free_request(request, *args, **kwargs)

    def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
        result = super().update_from_output(*args, **kwargs)
        # tokens each request received this step (with speculative decoding: 1 + accepted)
        out = {o.request_id: len(o.new_token_ids) for eco in result.values() for o in eco.outputs}
        self._write({"ev": "upd", "out": out})
        return result
