"""One preflight / validation finding: ok, warn or fail, with what to do about it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from harness.errors import ConfigError

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    remedy: str = ""

    def line(self) -> str:
        text = f"{self.status.upper():4} {self.name}: {self.detail}"
        return f"{text} -- {self.remedy}" if self.remedy and self.status != "ok" else text

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class PreflightError(ConfigError):
    """Failing preflight checks: one line per check, each with its remedy."""


def failures(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


def raise_on_failures(checks: list[Check], what: str = "preflight") -> None:
    failed = failures(checks)
    if failed:
        lines = "\n".join(c.line() for c in failed)
        raise PreflightError(f"{what}: {len(failed)} check(s) failed\n{lines}")
