"""The one reader of environment variables (docs/workloads.md §4).

Every variable the harness reads is a row of :data:`VARIABLES`: its name, the type of its
value, its default and what it means. Code elsewhere in ``harness/`` asks this module
(:func:`text`, :func:`path`, :func:`flag`, :func:`integer`) instead of ``os.environ``, so that
the table is the complete list, and a run records what was set (:func:`snapshot`, the
manifest's ``environment``). ``tests/test_env.py`` fails on any read of ``os.environ`` or
``os.getenv`` elsewhere in ``harness/``.

Writes are not reads: setting or removing a variable for this process
(``os.environ[k] = v``, ``del``, a ``pop``/``setdefault``/``update`` whose result is unused)
stays where it happens. A child process's environment is built here (:func:`for_child`), since
copying the whole environment reads every variable.

Values are read at call time, never cached: tests set variables with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError

_OFF = frozenset({"0", "false", "off", "no"})
_ON = frozenset({"1", "true", "on", "yes"})


@dataclass(frozen=True)
class Variable:
    """One environment variable the harness reads. ``family``: the name is a prefix
    (``REPRO_PYTHON_`` + ``3_11``); ``secret``: recorded as set, never by value."""

    name: str
    kind: str  # path | text | flag | integer | list | seconds
    default: str  # what applies when it is unset, in words
    meaning: str
    family: bool = False
    secret: bool = False


VARIABLES: tuple[Variable, ...] = (
    # the harness's own
    Variable("REPRO_CACHE", "path", "~/.cache/repro",
             "root of build venvs, tiny models, launch logs and compile caches"),
    Variable("REPRO_RESULTS", "path", "<repo>/results", "default parent of run directories"),
    Variable("REPRO_DASHBOARDS", "path", "<repo>/dashboards", "default folder of HTML reports"),
    Variable("REPRO_HISTORY", "path", "<results>/history.sqlite",
             "the accepted-run history database (also `repro regress --db`)"),
    Variable("REPRO_STOP_TIMEOUTS", "seconds", "60,60,30 with GPUs, 20,15,10 without",
             "seconds a launched server gets after SIGINT, SIGTERM and SIGKILL"),
    Variable("REPRO_CPU_EXTRA_INDEX_URL", "list", "none",
             "extra package indexes (space separated) for CPU builds"),
    Variable("REPRO_PAD_CACHE", "flag", "on", "reuse the dataset builder's cached pad pools"),
    Variable("REPRO_SCHED_TRACE", "path", "none (no trace)",
             "the scheduler trace file, read inside a vLLM server started with the tracer"),
    Variable("REPRO_PYTHON_", "path", "python<M.m> on PATH",
             "the interpreter for builds pinned to Python M.m (REPRO_PYTHON_3_11)", family=True),
    Variable("REPRO_PREBUILT_WHEEL_", "path", "the build's prebuilt_wheel",
             "a local wheel for a source build (REPRO_PREBUILT_WHEEL_<BUILD NAME>)", family=True),
    # the Hugging Face hub's (the same meaning as in huggingface_hub)
    Variable("HF_HOME", "path", "~/.cache/huggingface", "the hub's home folder"),
    Variable("HF_HUB_CACHE", "path", "$HF_HOME/hub", "the hub's model and dataset cache"),
    Variable("HF_HUB_OFFLINE", "flag", "off", "never contact a hub (Hugging Face or ModelScope)"),
    Variable("TRANSFORMERS_OFFLINE", "flag", "off", "transformers never contacts the hub"),
    Variable("HF_TOKEN", "text", "none", "hub access token", secret=True),
    Variable("HUGGING_FACE_HUB_TOKEN", "text", "none", "hub access token (older name)",
             secret=True),
    # tokenizers (the dataset builder's batch encoding)
    Variable("TOKENIZERS_PARALLELISM", "flag", "on", "tokenizers may use several threads"),
    Variable("RAYON_NUM_THREADS", "integer", "the CPU count", "threads of the tokenizers pool"),
    Variable("RAYON_RS_NUM_CPUS", "integer", "the CPU count", "the same (older name)"),
    # the machine and the tools the harness drives
    Variable("CUDA_HOME", "path", "none (nvcc on PATH)", "the CUDA toolkit for source builds"),
    Variable("BROWSER_PATH", "path", "a Chromium on PATH",
             "the browser kaleido drives to export PNG/SVG figures"),
    Variable("PYTHONPATH", "text", "none",
             "passed on to Slurm jobs and the simulated server so they import the harness"),
    Variable("NO_PROXY", "text", "none", "kept for children, loopback added"),
    Variable("no_proxy", "text", "none", "the same (lower-case spelling)"),
    Variable("VLLM_HOST_IP", "text", "none", "kept for a server not bound to loopback"),
    Variable("GITHUB_STEP_SUMMARY", "path", "none",
             "the nightly appends its markdown summary here (GitHub Actions)"),
    # Slurm, inside a job
    Variable("SLURM_JOB_ID", "text", "none", "the job this process runs in"),
    Variable("SLURM_ARRAY_JOB_ID", "text", "none", "the array job this task belongs to"),
    Variable("SLURM_ARRAY_TASK_ID", "integer", "none", "this task's index in its array"),
    Variable("SLURM_RESTART_COUNT", "integer", "0", "how often the job was requeued"),
    Variable("SLURMD_NODENAME", "text", "the host name", "the node the job runs on"),
    Variable("SLURM_JOB_PARTITION", "text", "none", "the job's partition"),
)  # fmt: skip

_BY_NAME = {v.name: v for v in VARIABLES if not v.family}
_FAMILIES = tuple(v for v in VARIABLES if v.family)


def variable(name: str) -> Variable:
    """The table's row for ``name``; a name not in the table is a programming error."""
    row = _BY_NAME.get(name)
    if row is not None:
        return row
    for family in _FAMILIES:
        if name.startswith(family.name) and len(name) > len(family.name):
            return family
    raise KeyError(f"{name} is not in harness.env.VARIABLES: add a row for it")


def text(name: str) -> str | None:
    """The raw value (None when unset or empty)."""
    variable(name)
    return os.environ.get(name) or None


def path(name: str) -> Path | None:
    value = text(name)
    return Path(value).expanduser() if value else None


def flag(name: str, default: bool) -> bool:
    """On/off: 1/true/on/yes or 0/false/off/no (any case); unset or anything else: default."""
    value = (text(name) or "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    return default


def is_off(name: str) -> bool:
    """Explicitly switched off (0/false/off/no); unset is not off."""
    return (text(name) or "").strip().lower() in _OFF


def integer(name: str, default: int | None = None) -> int | None:
    value = text(name)
    if value is None:
        return default
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(f"{name}={value!r}: expected a whole number") from None


def for_child(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: this one's, plus ``extra``."""
    return {**os.environ, **(extra or {})}


def with_prefix(prefix: str, names: Iterable[str] = ()) -> dict[str, str]:
    """Every set variable whose name starts with ``prefix``, plus the ``names`` that are set
    (what a Slurm job is handed on)."""
    wanted = set(names)
    for name in wanted:
        variable(name)
    return {k: v for k, v in os.environ.items() if k.startswith(prefix) or k in wanted}


def snapshot() -> dict[str, str]:
    """Every variable of the table that is set, by name (a secret as ``<set>``): what a run's
    manifest records as ``environment``."""
    seen: dict[str, str] = {}
    for name, value in sorted(os.environ.items()):
        try:
            row = variable(name)
        except KeyError:
            continue
        if value:
            seen[name] = "<set>" if row.secret else value
    return seen


def table_markdown() -> str:
    """The table as markdown (docs/workloads.md §4 holds this text; a test compares them)."""
    lines = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for row in VARIABLES:
        name = f"`{row.name}<…>`" if row.family else f"`{row.name}`"
        lines.append(f"| {name} | {row.kind} | {row.default} | {row.meaning} |")
    return "\n".join(lines)


def hf_hub_cache() -> Path:
    """The hub cache as huggingface_hub resolves it: HF_HUB_CACHE, else $HF_HOME/hub."""
    home = path("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return path("HF_HUB_CACHE") or home / "hub"
