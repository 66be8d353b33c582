"""The server a sweep drives: the protocol every engine implements, and which one to start.

Engines: `vllm` (a build + profile the harness launches and owns), `sim` (the simulated engine
served over HTTP, `harness.sim.serve`, launched and owned the same way) and `url` (a server
someone else runs). The checks that need no run directory (a malformed or dead `--url`, a busy port,
too few GPUs) run here before the run directory exists, so a mistake leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from harness.errors import ServerError
from harness.serve.attached import AttachedServer
from harness.serve.profiles import Profile
from harness.serve.server import VllmServer, port_is_free, require_gpus

Echo = Callable[[str], None]


class Server(Protocol):
    """What the run layer needs from a server, whoever runs it."""

    base_url: str
    command: list[str]

    @property
    def served_model_name(self) -> str: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...

    def provenance(self) -> dict[str, Any]: ...


ENGINES = ("vllm", "sim")


def engine_name(url: str | None, engine: str = "vllm") -> str:
    return "url" if url else engine


def check_url(url: str) -> str:
    """A well-formed http(s)://host[:port] base URL, or an error naming it."""
    parsed = urlparse(url)
    try:
        parsed.port  # noqa: B018 - raises on a non-numeric or out-of-range port
    except ValueError as exc:
        raise ServerError(f"--url {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ServerError(f"--url {url!r}: expected http://host:port")
    return url


def check_before_run(
    profile: Profile, *, url: str | None, port: int | None, engine: str = "vllm"
) -> None:
    """Everything that can fail before a run directory is created."""
    if url:
        check_url(url)
        if not AttachedServer(url).alive():
            raise ServerError(f"--url {url}: /health did not answer (is the server up?)")
        return
    use_port = port or profile.port
    if not port_is_free(profile.host, use_port):
        raise ServerError(
            f"port {use_port} on {profile.host} is busy; pick another with --port, "
            "or stop what is listening there"
        )
    if engine != "sim":  # the simulated engine needs no GPU
        require_gpus(profile)


def start_server(
    profile: Profile,
    *,
    log_path: Path,
    url: str | None,
    echo: Echo,
    port: int | None = None,
    engine: str = "vllm",
    sim: dict[str, Any] | None = None,
) -> Server:
    """Attach to `url`, or launch the profile's vLLM build (or the simulated engine, with `sim`:
    time_scale, dataset, args, overrides) and wait until it is ready."""
    if engine == "sim" and not url:
        from harness.sim.serve.process import SimServer

        opts = sim or {}
        echo(
            f"starting the simulated engine for profile {profile.name} "
            f"(time scale {opts.get('time_scale')}); log: {log_path}"
        )
        sim_server = SimServer(
            profile,
            log_path=log_path,
            port=port,
            echo=echo,
            time_scale=float(opts.get("time_scale") or 1.0),
            dataset=opts.get("dataset"),
            extra_args=opts.get("args", ()),
            overrides=opts.get("overrides", ()),
        )
        sim_server.start()
        echo(f"sim server ready at {sim_server.base_url}")
        return sim_server
    if url:
        attached = AttachedServer(url)
        if not attached.alive():
            raise ServerError(f"--url {url}: /health did not answer")
        echo(f"attached to {attached.base_url} (model {attached.served_model_name})")
        return attached
    echo(f"starting vLLM ({profile.build}) for profile {profile.name}; log: {log_path}")
    server = VllmServer(profile, log_path=log_path, port=port, echo=echo)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    echo(f"server ready at {server.base_url}")
    return server
