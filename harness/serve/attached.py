"""A server someone else runs (`--url`): the harness reads it and never starts or stops it."""

from __future__ import annotations

from typing import Any

import requests

from harness.errors import ServerError
from harness.serve.endpoints import live_facts, loopback_session


class AttachedServer:
    """A server someone else runs (`--url`); the harness never starts or stops it."""

    def __init__(self, url: str):
        base = url.rstrip("/").removesuffix("/v1")
        if not base.startswith(("http://", "https://")):
            raise ServerError(f"--url {url!r}: expected http://host:port")
        self.base_url = base
        self.command: list[str] = []
        self.pid: int | None = None
        self._served: str | None = None

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    def served_model_name(self) -> str:
        if self._served is None:
            try:
                models = loopback_session().get(f"{self.base_url}/v1/models", timeout=10).json()
                self._served = models["data"][0]["id"]
            except (requests.RequestException, ValueError, KeyError, IndexError) as exc:
                raise ServerError(f"{self.base_url}/v1/models: no served model ({exc})") from exc
        return self._served

    def alive(self) -> bool:
        try:
            return loopback_session().get(f"{self.base_url}/health", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def start(self) -> AttachedServer:
        return self

    def stop(self) -> None:
        """Not ours to stop."""

    def restart(self) -> None:
        raise ServerError(f"{self.base_url}: an attached server cannot be restarted by repro")

    def log_tail(self, lines: int = 40) -> str:
        return ""

    def provenance(self) -> dict[str, Any]:
        record: dict[str, Any] = {"engine": "url", "base_url": self.base_url}
        try:
            record["models"] = (
                loopback_session().get(f"{self.base_url}/v1/models", timeout=10).json()
            )
        except (requests.RequestException, ValueError):
            record["models"] = None
        record.update(live_facts(self.base_url, self.metrics_url))
        return record
