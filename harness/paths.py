"""Where things live: the repository's data folders and the cache (REPRO_CACHE)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import env as harness_env
from harness.errors import ConfigError, ReproError, RunError

REPO_ROOT = Path(__file__).resolve().parent.parent
LAUNCH_DIR = REPO_ROOT / "launch"
PROFILES_DIR = LAUNCH_DIR / "profiles"
BUILDS_FILE = LAUNCH_DIR / "builds.yaml"
MODELS_DIR = LAUNCH_DIR / "models"
CLAIMS_DIR = LAUNCH_DIR / "claims"
DATASETS_DIR = REPO_ROOT / "datasets"


def cache_dir() -> Path:
    """Root of everything heavy and re-creatable: build venvs, tiny models, compile caches."""
    root = harness_env.text("REPRO_CACHE")
    path = Path(root).expanduser() if root else Path.home() / ".cache" / "repro"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = (
            f"REPRO_CACHE={root}" if root else f"cache folder {path} (from HOME; set REPRO_CACHE)"
        )
        why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise ConfigError(f"{what}: cannot create it ({why}: {exc.filename})") from None
    return path


def results_dir() -> Path:
    """Default parent of run directories (override with REPRO_RESULTS or --out)."""
    root = harness_env.text("REPRO_RESULTS")
    return Path(root).expanduser() if root else REPO_ROOT / "results"


def dashboards_dir() -> Path:
    root = harness_env.text("REPRO_DASHBOARDS")
    return Path(root).expanduser() if root else REPO_ROOT / "dashboards"


_VIEWS = (".html", ".png", ".svg", ".md")  # regenerable from the records


def check_not_run_record(path: Path, option: str) -> None:
    """A file the user names for an output (--markdown, --summary, --json) never replaces a
    record of an existing run (its manifest, summary, a point's JSON...): only views
    (HTML, figures, markdown) may be rewritten inside a run directory."""
    if path.suffix in _VIEWS or not path.exists():
        return
    resolved = path.resolve()
    for parent in [resolved.parent, *resolved.parent.parents][:3]:  # RUN/points/<id>/point.json
        if (parent / "manifest.json").is_file():
            raise RunError(
                f"{option} {path}: a record of run {parent}; a run's records are never "
                "overwritten (choose another path)"
            )


def check_writable(path: Path) -> None:
    """Fail now, naming ``path``, when a file cannot be written there (before hours of work
    whose record would be lost at the end); creates missing parent folders."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(path))
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}."):
            pass
    except OSError as exc:
        in_way = isinstance(exc, FileExistsError | NotADirectoryError)
        why = f"a file is in the way: {exc.filename}" if in_way else exc.strerror
        raise ReproError(f"{path}: cannot write there ({why})") from None
