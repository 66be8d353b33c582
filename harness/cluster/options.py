"""Slurm job settings: from the command line and a small YAML file, validated strictly.

A config file (`--slurm-config FILE`) holds defaults for a site; command-line values win:

    partition: gpu
    account: my-project
    time: "12:00:00"          # Slurm's formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
    gres: gpu:8               # default: gpu:<profile gpus>, none for a CPU profile
    cpus_per_task: 16
    setup:                    # shell lines run in the job before the sweep
      - module load cuda/12.4
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.config import safe_load, yaml_problem
from harness.errors import ConfigError

# Slurm's time formats (sbatch --time), all converted to whole minutes (Slurm rounds up too).
_TIME = re.compile(
    r"(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?)"
    r"|(?:(?P<h>\d+):(?P<m>\d+):(?P<s>\d+))"
    r"|(?:(?P<mm>\d+)(?::(?P<ss>\d+))?)"
)
_GRES = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(:[A-Za-z0-9_.-]+)?:\d+")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
KEYS = ("partition", "account", "time", "gres", "cpus_per_task", "setup")


def parse_time(value: str, *, where: str = "--slurm-time") -> int:
    """Slurm's time formats -> minutes (>= 1)."""
    match = _TIME.fullmatch(str(value).strip())
    if not match:
        raise ConfigError(
            f"{where} {value!r}: not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)"
        )
    g = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "d" in g:
        seconds = ((g["d"] * 24 + g["dh"]) * 60 + g.get("dm", 0)) * 60 + g.get("ds", 0)
    elif "h" in g:
        seconds = (g["h"] * 60 + g["m"]) * 60 + g["s"]
    else:
        seconds = g["mm"] * 60 + g.get("ss", 0)
    if seconds <= 0:
        raise ConfigError(f"{where} {value!r}: a time limit must be > 0")
    return math.ceil(seconds / 60)


def check_gres(value: str, *, where: str = "--slurm-gres") -> str | None:
    """`gpu:8`, `gpu:h200:8`; `none` requests no generic resources."""
    if value.strip().lower() == "none":
        return None
    if not _GRES.fullmatch(value.strip()):
        raise ConfigError(f"{where} {value!r}: expected NAME[:TYPE]:COUNT (e.g. gpu:8) or none")
    return value.strip()


def _check_name(value: str, where: str) -> str:
    if not _NAME.fullmatch(value):
        raise ConfigError(f"{where} {value!r}: letters, digits and . _ - only")
    return value


def _check_setup(lines: Any, where: str) -> list[str]:
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise ConfigError(f"{where}: expected a list of shell lines (strings)")
    for line in lines:
        if "\n" in line or not line.strip():
            raise ConfigError(f"{where} {line!r}: one non-empty shell line per entry")
    return list(lines)


@dataclass(frozen=True)
class SlurmOptions:
    """What a sweep job asks Slurm for (None: the cluster's default)."""

    partition: str | None = None
    account: str | None = None
    time_min: int | None = None
    gres: str | None = None
    gres_given: bool = False  # False: gres comes from the profile's GPUs
    cpus_per_task: int | None = None
    setup: tuple[str, ...] = field(default_factory=tuple)

    def gres_for(self, gpus: int) -> str | None:
        if self.gres_given:
            return self.gres
        return f"gpu:{gpus}" if gpus > 0 else None


def load_config(path: Path) -> dict[str, Any]:
    """The config file's values, checked key by key (unknown keys are errors)."""
    try:
        data = safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--slurm-config {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--slurm-config {path}: cannot read ({exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--slurm-config {path}: not valid YAML ({yaml_problem(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; known: {', '.join(KEYS)}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}: {key}"
        if key in ("partition", "account"):
            if not isinstance(value, str):
                raise ConfigError(f"{where}: expected a string, got {value!r}")
            out[key] = _check_name(value, where)
        elif key == "time":
            out["time_min"] = parse_time(str(value), where=where)
        elif key == "gres":
            out["gres"], out["gres_given"] = check_gres(str(value), where=where), True
        elif key == "cpus_per_task":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{where}: expected an integer >= 1, got {value!r}")
            out[key] = value
        else:
            out["setup"] = tuple(_check_setup(value, where))
    return out


def slurm_options(
    *,
    config: Path | None = None,
    partition: str | None = None,
    account: str | None = None,
    time: str | None = None,
    gres: str | None = None,
    setup: tuple[str, ...] | list[str] = (),
) -> SlurmOptions:
    """Merge the config file (if any) and the command line; the command line wins."""
    values: dict[str, Any] = load_config(config) if config else {}
    if partition is not None:
        values["partition"] = _check_name(partition, "--slurm-partition")
    if account is not None:
        values["account"] = _check_name(account, "--slurm-account")
    if time is not None:
        values["time_min"] = parse_time(time)
    if gres is not None:
        values["gres"], values["gres_given"] = check_gres(gres), True
    if setup:
        values["setup"] = tuple(_check_setup(list(setup), "--slurm-setup"))
    return SlurmOptions(**values)
