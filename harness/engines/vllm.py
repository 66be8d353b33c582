"""`vllm`: a pinned build of the profile, launched and owned by the harness."""

from __future__ import annotations

from typing import Literal

from harness.engines.base import Engine, EngineArgs, Server, StartContext
from harness.serve.profiles import Profile
from harness.serve.server import VllmServer


class VllmArgs(EngineArgs):
    kind: Literal["vllm"] = "vllm"  # the build and serve options are the profile's


class VllmEngine(Engine):
    kind = "vllm"
    record_name = "vllm"
    args_model = VllmArgs
    cli_name = "vllm"

    def start(self, profile: Profile, args: EngineArgs, ctx: StartContext) -> Server:
        ctx.echo(f"starting vLLM ({profile.build}) for profile {profile.name}; log: {ctx.log_path}")
        server = VllmServer(profile, log_path=ctx.log_path, port=ctx.port, echo=ctx.echo)
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        ctx.echo(f"server ready at {server.base_url}")
        return server
