"""Accepted history: what a new run is judged against. This module is its one reader and
writer; it keeps two stores, one per kind of run, because they need different things:

- :class:`History`: served runs, in one append-only SQLite file (``results_dir()/history.sqlite``;
  REPRO_HISTORY). Every recorded run stays, accepted or rejected, with the story of its state
  changes; a verdict's baseline is the median of the last N accepted runs of its key. Nightly
  arms are recorded by concurrent processes and a year of nights holds thousands of full
  manifests and point snapshots, which SQLite's locking and indexed queries serve (a text file
  rewritten on every append would not).
- :class:`SimulatedHistory`: the simulated arms' exact values, as JSON lines committed to the
  repository (``launch/history/*.jsonl``). The simulator is deterministic, so the gate is
  equality with the arm's last accepted entry; a push runner starts with no state, so the file
  in git is the history, and its diff is the review of an accepted change (docs/regression.md §1).

``History`` has two tables, both insert-only (triggers abort any UPDATE or DELETE):

- ``runs``: one row per recorded run: its history key, the manifest facts the verdict needs and
  a snapshot of every point's metrics, so a baseline can be rebuilt even after the run
  directory is gone.
- ``events``: state changes of a run (``accepted`` / ``rejected``), each with a reason and who
  made it. The current state of a run is its latest event; nothing is rewritten, so a rejected
  run stays visible as rejected and the full story stays in ``repro history show``.

History key = ``<profile>[+set-<hash of overrides>]/wl-<workload hash>/hw-<hardware hash>``:
the profile, the client workload (:func:`harness.identity.workload_identity`) and the hardware
(:func:`hardware_fingerprint`). The build is deliberately not in the key: nightly builds change
every night and are what the history watches.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness import env as harness_env
from harness.analysis.groups import point_rows
from harness.errors import ConfigError, ReproError, RunError
from harness.gate.regress import RunView, view_from_parts
from harness.identity import workload_id, workload_identity
from harness.paths import REPO_ROOT, results_dir
from harness.records import promise_problems, row_ids, run_damage
from harness.results import Run, atomic_write_text

STATES = ("accepted", "rejected")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    history_key TEXT NOT NULL,
    profile TEXT NOT NULL,
    build TEXT,
    build_commit TEXT,
    created_at REAL NOT NULL,
    recorded_at REAL NOT NULL,
    manifest_json TEXT NOT NULL,
    points_json TEXT NOT NULL,
    UNIQUE (run_dir)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    run_ref INTEGER NOT NULL REFERENCES runs(id),
    state TEXT NOT NULL CHECK (state IN ('accepted', 'rejected')),
    reason TEXT NOT NULL,
    actor TEXT NOT NULL,
    verdict_json TEXT,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_key ON runs(history_key, created_at);
CREATE TRIGGER IF NOT EXISTS runs_no_update BEFORE UPDATE ON runs
    BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS runs_no_delete BEFORE DELETE ON runs
    BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
"""

# Host facts that identify the hardware (not its current load). Unknown layouts fall back to
# the whole host record minus obviously volatile entries.
_HARDWARE_HINTS = (
    "cpu",
    "core",
    "gpu",
    "nvidia",
    "model",
    "machine",
    "arch",
    "mem_total",
    "ram",
    "memory_total",
    "platform",
)
_VOLATILE_HINTS = (
    "free",
    "avail",
    "used",
    "util",
    "temp",
    "load",
    "uptime",
    "time",
    "pid",
    "hostname",
    "node",
    "boot",
    "clock",
    "power",
    "fan",
)


_NEUTRAL_OVERRIDES = ("build=", "port=", "host=")


def default_history_path() -> Path:
    override = harness_env.text("REPRO_HISTORY")
    return Path(override).expanduser() if override else results_dir() / "history.sqlite"


def hardware_fingerprint(host: dict[str, Any]) -> str:
    stable = {
        k: v
        for k, v in sorted(host.items())
        if any(h in k.lower() for h in _HARDWARE_HINTS)
        and not any(h in k.lower() for h in _VOLATILE_HINTS)
    }
    blob = json.dumps(stable, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:8]


def history_key(manifest_data: dict[str, Any], *, include_overrides: bool = True) -> str:
    """The run's series. ``include_overrides=False`` (the nightly's --set) treats overrides as
    part of the candidate under test, like the build, and keys the run as its plain profile."""
    profile = manifest_data.get("profile_name", "?")
    # build= is how the nightly swaps builds (the build is what history watches); port= and
    # host= only say where the server listens.
    overrides = [
        o for o in manifest_data.get("overrides") or [] if not o.startswith(_NEUTRAL_OVERRIDES)
    ]
    if not include_overrides:
        overrides = []
    if overrides:
        digest = hashlib.sha256("\n".join(sorted(overrides)).encode()).hexdigest()[:6]
        profile = f"{profile}+set-{digest}"
    workload = workload_id(workload_identity(manifest_data))
    hardware = hardware_fingerprint(manifest_data.get("host") or {})
    return f"{profile}/wl-{workload}/hw-{hardware}"


def baseline_problem(manifest_data: dict[str, Any], points: list[dict[str, Any]]) -> str | None:
    """Why a run (manifest as JSON data, :func:`point_rows` rows) is unfit as a baseline, or None.

    A baseline must be a complete run with at least one valid point; `repro history accept`
    refuses anything else unless forced."""
    problems = []
    status = manifest_data.get("status")
    if status != "complete":
        problems.append(f"status {status!r}")
    if not any(p.get("valid") for p in points):
        problems.append(f"0 valid points of {len(points)}")
    problems += promise_problems(manifest_data, row_ids(points))
    return ", ".join(problems) or None


@dataclass
class HistoryEntry:
    ref: int
    run_id: str
    run_dir: str
    key: str
    profile: str
    build: str | None
    build_commit: str | None
    created_at: float
    recorded_at: float
    state: str
    reason: str
    manifest: dict[str, Any]
    points: list[dict[str, Any]]

    def view(self) -> RunView:
        return view_from_parts(
            name=self.run_id,
            source=f"history#{self.ref} {self.run_dir}",
            manifest_data=self.manifest,
            rows=self.points,
        )


class History:
    """The store. Open with :meth:`open`; every write is one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def open(cls, path: Path | str | None = None) -> History:
        target = Path(path) if path else default_history_path()
        target.parent.mkdir(parents=True, exist_ok=True)
        history = cls(target)
        with history._connect() as db:
            db.executescript(_SCHEMA)
        return history

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as exc:  # e.g. the path is a folder
            raise ReproError(f"{self.path}: cannot open the history database ({exc})") from None
        db.row_factory = sqlite3.Row
        try:
            with db:  # commit on success, roll back on error
                yield db
        except sqlite3.DatabaseError as exc:
            raise ReproError(f"{self.path}: {exc}") from None
        finally:
            db.close()

    # ----------------------------------------------------------------- writing

    def record(
        self,
        run: Run,
        *,
        state: str,
        reason: str,
        verdict: dict[str, Any] | None = None,
        actor: str | None = None,
        key: str | None = None,
    ) -> HistoryEntry:
        """Append a run (once per run directory) and an event with its initial state.
        ``key`` defaults to :func:`history_key` of the run's manifest."""
        _check_state(state)
        damage = run_damage(run) if state == "accepted" else []
        if damage:  # not even with --force: its points are not what its manifest says
            raise RunError(f"{run.root}: damaged run, not accepted: {'; '.join(damage)}")
        manifest = run.manifest.model_dump(mode="json")
        build = manifest.get("build") or {}
        profile = manifest.get("profile") or {}
        with self._connect() as db:
            existing = db.execute(
                "SELECT id FROM runs WHERE run_dir = ?", (str(run.root.resolve()),)
            ).fetchone()
            if existing is not None:
                ref = existing["id"]
            else:
                ref = db.execute(
                    "INSERT INTO runs (run_id, run_dir, history_key, profile, build, build_commit,"
                    " created_at, recorded_at, manifest_json, points_json)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run.name,
                        str(run.root.resolve()),
                        key or history_key(manifest),
                        run.manifest.profile_name,
                        profile.get("build") or build.get("name"),
                        _build_commit(build),
                        run.manifest.created_at,
                        time.time(),
                        json.dumps(manifest),
                        json.dumps(point_rows(run)),
                    ),
                ).lastrowid
            self._event(db, ref, state, reason, actor, verdict)
        return self.entry(str(ref))

    def set_state(
        self, ref: str, state: str, reason: str, actor: str | None = None
    ) -> HistoryEntry:
        """accept/reject: a new event row; the run's earlier events stay."""
        _check_state(state)
        entry = self.entry(ref)
        with self._connect() as db:
            self._event(db, entry.ref, state, reason, actor, None)
        return self.entry(str(entry.ref))

    @staticmethod
    def _event(
        db: sqlite3.Connection,
        ref: int,
        state: str,
        reason: str,
        actor: str | None,
        verdict: dict[str, Any] | None,
    ) -> None:
        db.execute(
            "INSERT INTO events (run_ref, state, reason, actor, verdict_json, at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                ref,
                state,
                reason,
                actor or _whoami(),
                json.dumps(verdict) if verdict else None,
                time.time(),
            ),
        )

    # ----------------------------------------------------------------- reading

    _SELECT = (
        "SELECT r.*, e.state AS state, e.reason AS reason FROM runs r"
        " JOIN events e ON e.id = (SELECT MAX(id) FROM events WHERE run_ref = r.id)"
    )

    def entries(self, key: str | None = None, state: str | None = None) -> list[HistoryEntry]:
        query, args = self._SELECT, []
        clauses = []
        if key:
            clauses.append("r.history_key = ?")
            args.append(key)
        if state:
            clauses.append("e.state = ?")
            args.append(state)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY r.created_at, r.id"
        with self._connect() as db:
            return [_entry(row) for row in db.execute(query, args).fetchall()]

    def entry(self, ref: str) -> HistoryEntry:
        """By numeric id, run id or run directory (the latest record if a run id repeats)."""
        with self._connect() as db:
            row = None
            if ref.isdigit():
                row = db.execute(self._SELECT + " WHERE r.id = ?", (int(ref),)).fetchone()
            if row is None:
                resolved = str(Path(ref).resolve()) if Path(ref).exists() else ref
                row = db.execute(
                    self._SELECT + " WHERE r.run_id = ? OR r.run_dir = ? ORDER BY r.id DESC",
                    (ref, resolved),
                ).fetchone()
        if row is None:
            raise RunError(f"{self.path}: no run {ref!r} in the history")
        return _entry(row)

    def events(self, ref: str) -> list[dict[str, Any]]:
        entry = self.entry(ref)
        with self._connect() as db:
            rows = db.execute(
                "SELECT state, reason, actor, at, verdict_json FROM events WHERE run_ref = ?"
                " ORDER BY id",
                (entry.ref,),
            ).fetchall()
        return [
            {
                "state": r["state"],
                "reason": r["reason"],
                "actor": r["actor"],
                "at": r["at"],
                "verdict": json.loads(r["verdict_json"]) if r["verdict_json"] else None,
            }
            for r in rows
        ]

    def keys(self) -> list[str]:
        with self._connect() as db:
            return [
                r[0]
                for r in db.execute(
                    "SELECT DISTINCT history_key FROM runs ORDER BY history_key"
                ).fetchall()
            ]

    def baseline(
        self, key: str, count: int, *, exclude_run_dir: Path | None = None
    ) -> list[HistoryEntry]:
        """The last ``count`` accepted runs with this key, oldest first."""
        accepted = self.entries(key=key, state="accepted")
        if exclude_run_dir is not None:
            skip = str(Path(exclude_run_dir).resolve())
            accepted = [e for e in accepted if e.run_dir != skip]
        return accepted[-count:]


def _entry(row: sqlite3.Row) -> HistoryEntry:
    return HistoryEntry(
        ref=row["id"],
        run_id=row["run_id"],
        run_dir=row["run_dir"],
        key=row["history_key"],
        profile=row["profile"],
        build=row["build"],
        build_commit=row["build_commit"],
        created_at=row["created_at"],
        recorded_at=row["recorded_at"],
        state=row["state"],
        reason=row["reason"],
        manifest=json.loads(row["manifest_json"]),
        points=json.loads(row["points_json"]),
    )


def _check_state(state: str) -> None:
    if state not in STATES:
        raise ReproError(f"history state {state!r}: must be one of {', '.join(STATES)}")


def _build_commit(build: dict[str, Any]) -> str | None:
    for key in ("commit", "vllm_commit", "git_commit", "resolved_commit", "version"):
        value = build.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "unknown"


# --------------------------------------------------------------------------- simulated arms

SIMULATED_SCHEMA: Final = "repro.sim-accepted/1"
DEFAULT_SIMULATED_HISTORY = REPO_ROOT / "launch" / "history" / "sim-glm53-h200.jsonl"


class SimulatedEntry(BaseModel):
    """One accepted simulated run of one arm: its inputs and every point's values."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["repro.sim-accepted/1"] = SIMULATED_SCHEMA
    arm: str
    accepted_at: str
    reason: str
    commit: str | None
    harness_version: str
    inputs: dict[str, str | None]  # profile / calibration / dataset digests
    points: dict[str, dict[str, Any]]  # point id -> values


class SimulatedHistory:
    """The simulated arms' accepted values (one JSON line per entry, oldest first); a missing
    file is an empty history. Read whole on :meth:`open`, so a malformed line fails before any
    simulation runs."""

    def __init__(self, path: Path, entries: list[SimulatedEntry]) -> None:
        self.path = path
        self.entries = entries

    @classmethod
    def open(cls, path: Path | str = DEFAULT_SIMULATED_HISTORY) -> SimulatedHistory:
        target = Path(path)
        return cls(target, _read_simulated(target) if target.is_file() else [])

    def latest(self, arm: str) -> SimulatedEntry | None:
        """The arm's last accepted entry: what its next run must equal."""
        matching = [e for e in self.entries if e.arm == arm]
        return matching[-1] if matching else None

    def append(self, new: Sequence[SimulatedEntry]) -> None:
        """Append by rewriting the whole file atomically (a reader never sees half a line)."""
        old = self.path.read_text(encoding="utf-8") if self.path.is_file() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        lines = "".join(f"{e.model_dump_json()}\n" for e in new)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, old + lines)
        self.entries.extend(new)


def _read_simulated(path: Path) -> list[SimulatedEntry]:
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(SimulatedEntry.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "(line)"
            raise ConfigError(f"{path}:{number}: {where}: {first['msg']}") from None
    return entries
