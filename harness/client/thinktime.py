"""Think time inside EvalScope: a registered API plugin, run through a thin entry point.

Why an API plugin. In EvalScope 1.7 the multi-turn worker (`perf/core/strategies/multi_turn.py`)
builds each turn's body from the accumulated history and awaits
`api_plugin.process_request(...)`; the request's `start_time` is taken *inside*
`DefaultApiPlugin.process_request`, just before the HTTP POST. A plugin that awaits the pause
first and then calls the stock method therefore (a) delays the next turn of that conversation
only (the other workers keep running: it is an asyncio sleep), and (b) keeps the pause out of
the request's start, TTFT, TPOT and latency, which EvalScope measures from that start. A
dataset plugin cannot do this (it only yields messages, before any request is sent), and a
wrapper around the runner would have to copy its loop. Everything else (history, replies,
sqlite, summaries) is EvalScope's own code.

`python -m harness.client.thinktime --think JSON --log FILE [--dataset PATH] [--time-scale K]
-- perf ARGS...` registers the plugin as ``--api repro_think`` and runs EvalScope's own CLI
with ``ARGS`` (``harness.client.evalscope.client_command`` builds this when a workload has
think time; without it the harness runs the plain `evalscope perf` command, byte for byte).

The pause before turn t of a conversation is `PauseTable.pause(index, t)`: the conversation's
dataset index comes from its first turn's messages (the same key the per-request table uses).
Every pause is logged as one JSON line (key, conversation, turn, pause_s, sleep_start,
sleep_end on the `perf_counter` clock EvalScope's sqlite uses), so tests and the per-request
table can check each turn against its drawn pause. Under a simulated engine running K x faster
than real time, the client sleeps pause / K real seconds (the logged pause is virtual).

Every request (every turn, the first too) also leaves one ``"kind": "usage"`` line: its key,
turn, `start` (EvalScope's own `start_time`, the value its sqlite stores, so the per-request
table joins on it exactly) and `server_cached_tokens`, the server's
`usage.prompt_tokens_details.cached_tokens` (vLLM sends it only when served with
`--enable-prompt-tokens-details`; null otherwise). EvalScope keeps that number in memory but not
in its sqlite, and it is the only per-request view of what the server's prefix cache held: the
client's own figure is an estimate that cannot show cache a pause lost (docs/metrics.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from evalscope.perf.plugin.api.openai_api import OpenaiPlugin
from evalscope.perf.plugin.registry import register_api

from harness.analysis.request_table import dataset_keys, first_turn_key
from harness.dataset.thinktime import PauseTable, ThinkTime

API_NAME = "repro_think"


class ThinkSettings:
    """What the plugin needs, set once by `main` before EvalScope starts."""

    def __init__(
        self, model: ThinkTime, log: Path, keys: dict[str, int], time_scale: float = 1.0
    ) -> None:
        self.table = PauseTable(model)
        self.log = log
        self.keys = keys
        self.time_scale = time_scale
        self._unknown: dict[str, int] = {}

    def conversation(self, key: str) -> int:
        """Dataset index; an unknown first turn gets -1, -2, ... (each drawn on its own)."""
        if key in self.keys:
            return self.keys[key]
        return -1 - self._unknown.setdefault(key, len(self._unknown))

    def record(self, entry: dict[str, Any]) -> None:
        with open(self.log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, separators=(",", ":")) + "\n")


@register_api(API_NAME)
class ThinkTimeOpenaiPlugin(OpenaiPlugin):
    """EvalScope's `openai` API plugin, pausing before every turn after the first."""

    settings: ClassVar[ThinkSettings | None] = None

    async def process_request(self, client_session, url, headers, body):
        settings = type(self).settings
        messages = body.get("messages") if isinstance(body, dict) else None
        if settings is None or not isinstance(messages, list):
            return await super().process_request(client_session, url, headers, body)
        turn = 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        key = first_turn_key(messages)
        if turn > 1:
            conversation = settings.conversation(key)
            pause = settings.table.pause(conversation, turn)
            sleep_start = time.perf_counter()
            await asyncio.sleep(pause / settings.time_scale)
            settings.record(
                {
                    "kind": "pause",
                    "key": key,
                    "conversation": conversation,
                    "turn": turn,
                    "pause_s": pause,
                    "sleep_start": sleep_start,
                    "sleep_end": time.perf_counter(),
                }
            )
        output = await super().process_request(client_session, url, headers, body)
        cached = getattr(output, "real_cached_tokens", None)
        settings.record(
            {
                "kind": "usage",
                "key": key,
                "turn": turn,
                "start": getattr(output, "start_time", None),
                "server_cached_tokens": cached if isinstance(cached, int) else None,
            }
        )
        return output


def read_log(path: Path, kind: str = "pause") -> list[dict[str, Any]]:
    """The plugin's log entries of one kind: ``pause`` ([] when it paused nothing) or
    ``usage`` (one per request)."""
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [e for e in entries if e.get("kind", "pause") == kind]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m harness.client.thinktime OPTIONS -- perf ARGS...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="harness.client.thinktime")
    parser.add_argument("--think", required=True, help="ThinkTime as JSON")
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--dataset", type=Path, default=None)
    parser.add_argument("--time-scale", type=float, default=1.0)
    opts = parser.parse_args(argv[:split])
    model = ThinkTime.model_validate(json.loads(opts.think))
    opts.log.parent.mkdir(parents=True, exist_ok=True)
    ThinkTimeOpenaiPlugin.settings = ThinkSettings(
        model, opts.log, dataset_keys(opts.dataset), opts.time_scale
    )
    from evalscope.cli.cli import run_cmd

    sys.argv = ["evalscope", *argv[split + 1 :]]
    run_cmd()


if __name__ == "__main__":
    main()
