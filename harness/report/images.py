"""Static export of figures (PNG, SVG) with kaleido, and standalone HTML of one figure.

kaleido >= 1 renders in a real Chromium that it drives over the DevTools protocol; `repro` never
downloads one. It uses, in order: $BROWSER_PATH, then `chromium`, `chromium-browser`,
`google-chrome` on PATH. On Debian/Ubuntu: `apt-get install -y chromium`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from harness import env as harness_env
from harness.errors import ReproError
from harness.report.figures import pareto_figure
from harness.results import RunLayout, atomic_write_text, load_run

STATIC_FORMATS = ("png", "svg")
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
EXPORT_WIDTH, EXPORT_HEIGHT, PNG_SCALE = 1200, 880, 2

INSTALL_HINT = (
    "static export (PNG/SVG) needs kaleido and a Chromium: `pip install 'repro[export]'` and "
    "`apt-get install -y chromium` (Debian/Ubuntu), or set BROWSER_PATH to a Chrome/Chromium "
    "executable; an .html figure needs neither"
)


class ExportError(ReproError):
    """Static export is not possible on this machine (no kaleido or no Chromium)."""


def find_browser() -> str:
    """The Chromium kaleido will drive, or ExportError naming how to get one."""
    override = harness_env.text("BROWSER_PATH")
    if override:
        if Path(override).is_file() and os.access(override, os.X_OK):
            return override
        raise ExportError(f"BROWSER_PATH={override!r} is not an executable file; {INSTALL_HINT}")
    for name in BROWSER_NAMES:
        if found := shutil.which(name):
            return found
    raise ExportError(f"no Chromium found on PATH ({', '.join(BROWSER_NAMES)}); {INSTALL_HINT}")


EXPORT_ATTEMPTS = 3


def _written(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def export_figure(fig: go.Figure, path: Path) -> Path:
    """Write `fig` to `path`; the suffix picks the format (.png, .svg or .html)."""
    return export_figures([(fig, Path(path))])[0]


def export_figures(items: Sequence[tuple[go.Figure, Path]]) -> list[Path]:
    """Write each figure to its path (format from the suffix): HTML directly, PNG/SVG in one
    Chromium session (one browser start for all of them), each file replaced atomically."""
    static: list[tuple[go.Figure, Path, str]] = []
    for fig, path in items:
        path = Path(path)
        suffix = path.suffix.lower().lstrip(".")
        if suffix != "html" and suffix not in STATIC_FORMATS:
            raise ExportError(
                f"{path}: unknown figure format {path.suffix!r}; use .png, .svg or .html"
            )
        if suffix in STATIC_FORMATS:
            static.append((fig, path, suffix))
    if static:
        try:
            import kaleido  # noqa: F401  (only to give a clear error)
        except ImportError:
            raise ExportError(f"kaleido is not installed; {INSTALL_HINT}") from None
        browser = find_browser()
    for fig, path in items:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix.lower() == ".html":
            atomic_write_text(
                path,
                pio.to_html(
                    fig, include_plotlyjs=True, full_html=True, config={"displaylogo": False}
                ),
            )
    if not static:
        return [Path(path) for _fig, path in items]
    previous = harness_env.text("BROWSER_PATH")
    os.environ["BROWSER_PATH"] = browser  # choreographer (kaleido's driver) reads it
    tmps = [path.with_name(f".{path.name}.tmp.{suffix}") for _fig, path, suffix in static]
    try:
        _render_static(static, tmps, browser)
        for tmp, (_fig, path, _suffix) in zip(tmps, static, strict=True):
            os.replace(tmp, path)
    except ReproError:
        raise
    except Exception as exc:  # kaleido/choreographer raise many types; name the browser used
        names = ", ".join(str(path) for _fig, path, _suffix in static)
        raise ExportError(
            f"{names}: export with {browser} failed ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
        ) from exc
    finally:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        if previous is None:
            os.environ.pop("BROWSER_PATH", None)
        else:
            os.environ["BROWSER_PATH"] = previous
    return [Path(path) for _fig, path in items]


def _render_static(
    static: Sequence[tuple[go.Figure, Path, str]], tmps: Sequence[Path], browser: str
) -> None:
    """Render each static figure to its temporary file, in one kaleido call per attempt."""
    pending = list(range(len(static)))
    for _attempt in range(EXPORT_ATTEMPTS):
        pio.write_images(
            [static[i][0] for i in pending],
            [str(tmps[i]) for i in pending],
            format=[static[i][2] for i in pending],
            width=EXPORT_WIDTH,
            height=EXPORT_HEIGHT,
            scale=[PNG_SCALE if static[i][2] == "png" else 1 for i in pending],
        )
        # kaleido returns without raising when a render fails (it deletes the file and
        # keeps the error to itself); on a loaded machine that happens now and then, so
        # the renders that left no file are done again
        pending = [i for i in pending if not _written(tmps[i])]
        if not pending:
            break
    if pending:
        missing = ", ".join(str(static[i][1]) for i in pending)
        raise ExportError(
            f"{missing}: Chromium ({browser}) rendered no image in {EXPORT_ATTEMPTS} "
            f"attempts; {INSTALL_HINT}"
        )


RUN_FIGURES = {  # file stem -> figure definition; written into <run>/figures/ by `repro sweep`
    "pareto": "blog",
    "pareto-bench-sweep": "bench-sweep",
}


def write_run_figures(run_dir: Path, *, static: bool = True) -> tuple[list[Path], str | None]:
    """The run's figures as HTML (always) and PNG + SVG (when kaleido and a Chromium are
    there): (paths written, why static export was skipped or None)."""
    run = load_run(run_dir)
    out = RunLayout(Path(run_dir)).figures_dir
    figures = {stem: pareto_figure([run], definition=d) for stem, d in RUN_FIGURES.items()}
    written = export_figures([(fig, out / f"{stem}.html") for stem, fig in figures.items()])
    if not static:
        return written, "not asked for"
    try:
        written += export_figures(
            [
                (fig, out / f"{stem}.{fmt}")
                for stem, fig in figures.items()
                for fmt in STATIC_FORMATS
            ]
        )
    except ExportError as exc:
        return written, str(exc)
    return written, None
