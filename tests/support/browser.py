"""Shared test helpers (moved from test_dashboard_browser.py)."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import re
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("REPRO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _above_4(fd: int) -> int:
    """Move fd above 4 so the dup2 onto 3/4 in the child cannot clobber the other pipe end."""
    if fd > 4:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5)
    os.close(fd)
    return moved


class DevTools:
    """A minimal DevTools-protocol session with a headless Chromium over a pipe."""

    def __init__(self, profile_dir: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        to_child_r, from_child_w = _above_4(to_child_r), _above_4(from_child_w)

        args = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--mute-audio",
            "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile_dir}",
            "--window-size=1280,1600",
            "about:blank",
        ]
        # posix_spawn puts the pipe ends on fds 3/4 in the child without running Python there.
        self.pid = os.posix_spawn(
            CHROMIUM,
            args,
            dict(os.environ),
            setsid=True,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, to_child_r, 3),
                (os.POSIX_SPAWN_DUP2, from_child_w, 4),
            ],
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._cond = threading.Condition()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_child, 1 << 16):
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._cond:
                        self._replies[message["id"]] = message
                        self._cond.notify_all()
                else:
                    self.events.put(message)

    def call(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"DevTools {method} timed out")
                self._cond.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise RuntimeError(f"DevTools {method}: {reply['error']}")
        return reply.get("result", {})

    def _wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG) != (0, 0):
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        """Stop the browser's whole process group (it has helper processes)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
            if self._wait(10):
                break
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass


def require_chromium() -> None:
    """Fail (not skip) without Chromium: the browser checks are part of the suite everywhere."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium not found ({CHROMIUM}); install Debian's: apt-get install -y "
            "chromium (scripts/bootstrap.sh does this as root), or set REPRO_CHROMIUM"
        )


def open_in_chromium(html: Path, profile_dir: Path, scroll_to: str | None = None) -> dict[str, Any]:
    """Load `html`, let Plotly draw, and return what happened (events, screenshot, DOM facts)."""
    require_chromium()
    browser = DevTools(profile_dir)
    try:
        page = next(
            t for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page"
        )
        session = browser.call(
            "Target.attachToTarget", {"targetId": page["targetId"], "flatten": True}
        )["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable", session=session)
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        browser.call("Page.navigate", {"url": html.resolve().as_uri()}, session=session)
        drawn = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            result = browser.call(
                "Runtime.evaluate",
                {
                    "expression": "document.readyState === 'complete' ? "
                    "document.querySelectorAll('.js-plotly-plot').length : -1",
                    "returnByValue": True,
                },
                session=session,
            )
            drawn = result["result"].get("value", -1)
            if drawn > 0:
                break
            time.sleep(0.5)
        time.sleep(1.0)  # let pending console messages and requests arrive
        facts = browser.call(
            "Runtime.evaluate",
            {
                "expression": """({
            title: document.title,
            h1: document.querySelector('h1').textContent,
            plots: document.querySelectorAll('.js-plotly-plot').length,
            scripts: Array.from(document.scripts).map(s => s.type || 'js'),
            injected: document.querySelectorAll('img, iframe').length,
            body: document.body.innerText})""",
                "returnByValue": True,
            },
            session=session,
        )["result"]["value"]
        if scroll_to:  # element id to bring to the top before the screenshot
            browser.call(
                "Runtime.evaluate",
                {
                    "expression": f"document.getElementById("
                    f"{json.dumps(scroll_to)}).scrollIntoView()"
                },
                session=session,
            )
            time.sleep(0.5)
        shot = browser.call("Page.captureScreenshot", {"format": "png"}, session=session)
        events = []
        while not browser.events.empty():
            events.append(browser.events.get())
        return {
            "events": events,
            "facts": facts,
            "drawn": drawn,
            "screenshot": base64.b64decode(shot["data"]),
        }
    finally:
        browser.close()


def _problems(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    requests, errors, dialogs = [], [], []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            requests.append(params["request"]["url"])
        elif method == "Runtime.exceptionThrown":
            errors.append(json.dumps(params["exceptionDetails"])[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in {"error", "assert"}:
            errors.append(json.dumps(params.get("args"))[:500])
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            errors.append(params["entry"].get("text", "")[:500])
        elif method == "Page.javascriptDialogOpening":
            dialogs.append(params.get("message", ""))
    return {"requests": requests, "errors": errors, "dialogs": dialogs}


def _figures(html: str) -> dict[str, dict]:
    blocks = re.findall(
        r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', html, flags=re.DOTALL
    )
    return {ident: json.loads(body) for ident, body in blocks}
