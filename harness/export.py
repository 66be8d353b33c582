"""Static export of figures (PNG, SVG) with kaleido, and standalone HTML of one figure.

kaleido >= 1 renders in a real Chromium that it drives over the DevTools protocol; `repro` never
downloads one. It uses, in order: $BROWSER_PATH, then `chromium`, `chromium-browser`,
`google-chrome` on PATH. On Debian/Ubuntu: `apt-get install -y chromium`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from harness.errors import ReproError
from harness.results import atomic_write_text

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
    override = os.environ.get("BROWSER_PATH")
    if override:
        if Path(override).is_file() and os.access(override, os.X_OK):
            return override
        raise ExportError(f"BROWSER_PATH={override!r} is not an executable file; {INSTALL_HINT}")
    for name in BROWSER_NAMES:
        if found := shutil.which(name):
            return found
    raise ExportError(f"no Chromium found on PATH ({', '.join(BROWSER_NAMES)}); {INSTALL_HINT}")


def export_figure(fig: go.Figure, path: Path) -> Path:
    """Write `fig` to `path`; the suffix picks the format (.png, .svg or .html)."""
    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == "html":
        atomic_write_text(path, pio.to_html(fig, include_plotlyjs=True, full_html=True,
                                            config={"displaylogo": False}))
        return path
    if suffix not in STATIC_FORMATS:
        raise ExportError(f"{path}: unknown figure format {path.suffix!r}; use .png, .svg or .html")
    try:
        import kaleido  # noqa: F401  (only to give a clear error)
    except ImportError:
        raise ExportError(f"kaleido is not installed; {INSTALL_HINT}") from None
    browser = find_browser()
    previous = os.environ.get("BROWSER_PATH")
    os.environ["BROWSER_PATH"] = browser  # choreographer (kaleido's driver) reads it
    tmp = path.with_name(f".{path.name}.tmp.{suffix}")
    try:
        fig.write_image(str(tmp), format=suffix, width=EXPORT_WIDTH, height=EXPORT_HEIGHT,
                        scale=PNG_SCALE if suffix == "png" else 1)
        os.replace(tmp, path)
    except ReproError:
        raise
    except Exception as exc:  # kaleido/choreographer raise many types; name the browser used
        raise ExportError(f"{path}: export with {browser} failed ({type(exc).__name__}: {exc}); "
                          f"{INSTALL_HINT}") from exc
    finally:
        tmp.unlink(missing_ok=True)
        if previous is None:
            os.environ.pop("BROWSER_PATH", None)
        else:
            os.environ["BROWSER_PATH"] = previous
    return path
