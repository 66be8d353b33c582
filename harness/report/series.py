"""A figure's series: one per run (configured points, repeats reduced) or per published arm
(`launch/published/glm53-blog.yaml`), and the titles and footnote made from the runs' manifests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.groups import Key, SeriesPoint, finite, series_points
from harness.config import read_yaml
from harness.errors import ConfigError
from harness.paths import LAUNCH_DIR
from harness.report.bands import Interval, point_intervals
from harness.results import METRICS, UNCALIBRATED, Run
from harness.run.config import readable_config

PUBLISHED_FILE = LAUNCH_DIR / "published" / "glm53-blog.yaml"


@dataclass
class Series:
    name: str
    points: list[SeriesPoint]
    published: bool = False
    build: str | None = None
    color: str | None = None
    marker: str | None = None
    run: Run | None = None
    # per configured point, the simulator's 80 % intervals (report/bands.py); empty: none
    intervals: dict[Key, dict[str, Interval]] = field(default_factory=dict)


def build_label(build: dict[str, Any] | None) -> str | None:
    """A short build identifier from build provenance (commit if known, else name/version)."""
    if not build:
        return None
    for key in ("commit", "requested_commit", "vllm_commit", "git_commit", "sha"):
        value = build.get(key)
        if isinstance(value, str) and value and value != "latest":
            return value[:10]
    for key in ("build", "name", "vllm_version_output", "version"):
        value = build.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def simulated_label(calibration: str | None) -> str:
    """How a simulated series says what its step cost is: "simulated (glm53-h200)",
    "simulated, uncalibrated", or plain "simulated" when the run recorded neither."""
    if calibration == UNCALIBRATED:
        return "simulated, uncalibrated"
    return f"simulated ({calibration})" if calibration else "simulated"


def run_series(runs: Sequence[Run]) -> list[Series]:
    """One series per run, named by run id (profile name added when it differs; a simulated
    run's calibration, or "uncalibrated", after it)."""
    out = []
    for run in runs:
        manifest = run.manifest
        name = manifest.run_id
        if manifest.profile_name and manifest.profile_name not in name:
            name = f"{name} ({manifest.profile_name})"
        if manifest.simulated:
            name = f"{name} · {simulated_label(manifest.calibration)}"
        series = Series(
            name=name, points=series_points(run), build=build_label(manifest.build), run=run
        )
        series.intervals = point_intervals(run)
        out.append(series)
    return out


def load_published(path: Path | None = None) -> tuple[dict[str, Any], list[Series]]:
    """The published reference file and its series (labelled as published)."""
    path = path or PUBLISHED_FILE
    data = read_yaml(path, "published reference file")
    allowed_top = {
        "name",
        "title",
        "source",
        "uncertainty",
        "definitions",
        "gpus",
        "workload",
        "series",
    }
    if not isinstance(data, dict) or not isinstance(data.get("series"), list):
        raise ConfigError(f"{path}: expected a mapping with a 'series' list")
    if unknown := set(data) - allowed_top:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}")
    series: list[Series] = []
    for index, entry in enumerate(data["series"]):
        where = f"{path}: series[{index}]"
        if unknown := set(entry) - {"name", "build", "marker", "color", "points"}:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
        points = []
        for j, raw in enumerate(entry.get("points") or []):
            allowed = {
                "label",
                "parallel",
                "number",
                "interactivity",
                "throughput_per_gpu",
                "occupancy",
            }
            if unknown := set(raw) - allowed:
                raise ConfigError(f"{where}.points[{j}]: unknown key(s) {sorted(unknown)}")
            try:
                values = {key: finite(raw.get(key)) for key in METRICS}
                points.append(
                    SeriesPoint(
                        label=str(raw["label"]),
                        parallel=int(raw["parallel"]),
                        number=int(raw["number"]),
                        values=values,
                    )
                )
            except KeyError as exc:
                raise ConfigError(f"{where}.points[{j}]: missing key {exc}") from None
        series.append(
            Series(
                name=f"published · {entry['name']}",
                points=points,
                published=True,
                build=entry.get("build"),
                color=entry.get("color"),
                marker=entry.get("marker"),
            )
        )
    return data, series


# --------------------------------------------------------------------------- metadata text


def _serve(run: Run) -> dict[str, Any]:
    serve = run.manifest.profile.get("serve") if isinstance(run.manifest.profile, dict) else None
    return serve if isinstance(serve, dict) else {}


def _gpu_name(run: Run) -> str | None:
    host = run.manifest.host or {}
    smi = host.get("nvidia_smi")
    if isinstance(smi, dict) and isinstance(smi.get("gpus"), list) and smi["gpus"]:
        first = smi["gpus"][0]
        if isinstance(first, dict) and isinstance(first.get("name"), str):
            return first["name"]
    for key in ("gpu_name", "gpu", "gpus"):
        value = host.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value:
            first = value[0]
            if isinstance(first, str):
                return first
            if isinstance(first, dict) and isinstance(first.get("name"), str):
                return first["name"]
    return None


def _workload(run: Run) -> str:
    """The dataset recipe name, else the built file's stem."""
    dataset = run.manifest.dataset or {}
    for key in ("recipe", "name", "spec"):
        value = dataset.get(key)
        if isinstance(value, str) and value:
            return Path(value).stem if value.endswith((".json", ".yaml")) else value
    path = dataset.get("path")
    return Path(path).stem if isinstance(path, str) else "workload"


def run_title(run: Run) -> str:
    """ "model · workload · TPn[ DPn] · N× GPU" from the run's manifest."""
    manifest = run.manifest
    serve = _serve(run)
    model = serve.get("served-model-name") or manifest.profile.get("model") or "model"
    parts = [str(model), _workload(run)]
    tp = serve.get("tensor-parallel-size")
    dp = serve.get("data-parallel-size")
    if tp:
        parts.append(f"TP{tp}" + (f" DP{dp}" if dp and int(dp) > 1 else ""))
    gpus = int(manifest.profile.get("gpus") or 0) if isinstance(manifest.profile, dict) else 0
    parts.append(f"{gpus}× {_gpu_name(run) or 'GPU'}" if gpus else "CPU")
    return " · ".join(parts)


def figure_title(runs: Sequence[Run]) -> str:
    titles = list(dict.fromkeys(run_title(run) for run in runs))
    if len(titles) == 1:
        return titles[0]
    return " vs ".join(titles) if len(titles) <= 2 else f"{len(runs)} runs"


def _outputs(run: Run) -> tuple[int | None, bool]:
    """(max_tokens, fixed length) of the run's requests: from its run configuration, or the
    sweep as written for a record too partial to derive one from."""
    config = readable_config(run.manifest)
    if config is not None:
        workload = config.client_workload()
        return workload.max_tokens, workload.ignore_eos
    sweep = run.manifest.sweep
    return sweep.get("max_tokens"), bool(sweep.get("ignore_eos", False))


def footnote(runs: Sequence[Run], definition: str) -> str:
    """Workload and build facts, as the blog's footnote gives them."""
    facts = []
    turns = {p.turns for run in runs for p in run.points}
    outputs = [_outputs(run) for run in runs]
    max_tokens = {tokens for tokens, _ in outputs if tokens is not None}
    fixed = all(fixed for _, fixed in outputs)
    if turns and max_tokens:
        turn_text = "/".join(str(t) for t in sorted(turns))
        tokens = "/".join(str(t) for t in sorted(max_tokens))
        facts.append(
            f"Each point: {turn_text}-turn workload, "
            f"{'fixed ' if fixed else 'up to '}{tokens}-token outputs."
        )
    if definition == "blog":
        facts.append("Throughput includes logical prefix-cached prompt tokens.")
    else:
        facts.append("Per-user rate divides by configured (not achieved) concurrency.")
    builds = []
    for series in run_series(runs):
        if series.build:
            builds.append(f"{series.name}: {series.build}")
    if builds:
        facts.append("Builds: " + "; ".join(builds) + ".")
    return " ".join(facts)
