"""`url`: a server someone else runs (a cluster's, a colleague's); attached, never stopped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlparse

from harness.engines.base import Engine, EngineArgs, EngineOption, Server, StartContext
from harness.errors import ConfigError, ServerError
from harness.serve.attached import AttachedServer
from harness.serve.profiles import Profile


class UrlArgs(EngineArgs):
    kind: Literal["url"] = "url"
    url: str  # base URL as given (http://host:port, optionally ending in /v1)


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


class UrlEngine(Engine):
    kind = "url"
    record_name = "url"
    args_model = UrlArgs
    launches = False
    machine_preflight = True  # the doctor checks what applies to an attached server
    options = (
        EngineOption(
            "url",
            "--url",
            str,
            "Attach to a running OpenAI-compatible server instead of launching one.",
            selects=True,
        ),
    )

    def args_from_options(self, values: Mapping[str, Any]) -> EngineArgs:
        if not values.get("url"):
            raise ConfigError("engine url needs --url")
        return UrlArgs(url=values["url"])

    def attached_url(self, args: EngineArgs) -> str | None:
        assert isinstance(args, UrlArgs)
        return args.url

    def check_before_run(self, profile: Profile, args: EngineArgs, port: int | None) -> None:
        assert isinstance(args, UrlArgs)
        check_url(args.url)
        if not AttachedServer(args.url).alive():
            raise ServerError(f"--url {args.url}: /health did not answer (is the server up?)")

    def start(self, profile: Profile, args: EngineArgs, ctx: StartContext) -> Server:
        assert isinstance(args, UrlArgs)
        attached = AttachedServer(args.url)
        if not attached.alive():
            raise ServerError(f"--url {args.url}: /health did not answer")
        ctx.echo(f"attached to {attached.base_url} (model {attached.served_model_name})")
        return attached
