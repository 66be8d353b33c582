"""`SimServer`: the simulated server with a vLLM server's lifecycle (the run layer's `Server`).

Its life is `harness.serve.lifecycle.OwnedServer`'s, as for vLLM: own session/process group,
readiness (/health, /v1/models listing the served name, one warm-up completion), log file,
teardown SIGINT -> SIGTERM -> SIGKILL over the group, atexit stop. It supplies only its launch
(`python -m harness.cli sim serve ...`, no device check) and its provenance.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import env as harness_env
from harness.paths import REPO_ROOT
from harness.serve.lifecycle import Launch, OwnedServer
from harness.serve.profiles import Profile
from harness.serve.provenance import host_facts
from harness.sim.serve.server import read_facts

SIM_READY_TIMEOUT_S = 900.0  # a first start encodes the dataset (~1 min on 2 busy cores)


class SimServer(OwnedServer):
    what = "sim server"
    workdir_tag = "sim"

    def __init__(
        self,
        profile: Profile,
        *,
        log_path: Path,
        time_scale: float,
        dataset: str | None = None,
        port: int | None = None,
        echo: Callable[[str], None] | None = None,
        extra_args: Sequence[str] = (),
        overrides: Sequence[str] = (),
    ) -> None:
        sim_profile = profile.model_copy(update={"ready_timeout_s": SIM_READY_TIMEOUT_S})
        super().__init__(
            sim_profile, log_path=log_path, port=port, echo=echo, stop_timeouts=(10.0, 5.0, 5.0)
        )
        self.time_scale = float(time_scale)
        self.dataset = dataset
        self.extra_args = list(extra_args)
        self.overrides = list(overrides)

    def sim_command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "sim",
            "serve",
            "--profile",
            str(self.profile.source),
            "--host",
            self.profile.host,
            "--port",
            str(self.port),
            "--time-scale",
            f"{self.time_scale:g}",
        ]
        if self.dataset:
            cmd += ["--dataset", self.dataset]
        for item in self.overrides:  # serve./sweep. for the profile, sim.PARAM for the engine
            cmd += ["--set", item]
        return cmd + self.extra_args

    def launch(self, workdir: Path) -> Launch:
        env = harness_env.for_child()
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        env.setdefault("HF_HUB_OFFLINE", "1")
        return Launch(command=self.sim_command(), env=env)

    def provenance(self) -> dict[str, Any]:
        # the latest start's facts: a restarted server appends to the same log
        facts = read_facts(reversed(self.log_tail(200).splitlines()))
        return {
            "engine": "sim",
            "profile": self.profile.model_dump(mode="json"),
            "command": list(self.command),
            "command_line": shlex.join(self.command),
            "base_url": self.base_url,
            "served_model_name": self.served_model_name,
            "pid": self.pid,
            "time_scale": self.time_scale,
            "sim_args": list(self.extra_args),
            "sim": facts,
            "host": host_facts(),
            "started_at": self.started_at,
            "ready_seconds": self.ready_seconds,
            "log_path": str(self.log_path),
        }
