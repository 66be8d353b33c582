"""CLI wiring for the regress area: regress, claims, history, nightly (logic in the modules)."""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any

import click

from harness import engines
from harness.cli.cluster import executor_options, options_from
from harness.cli.options import flag, overrides_option, path_option, text_option
from harness.errors import ReproError

_RUN = click.Path(exists=True, file_okay=False, path_type=Path)
_CLAIMS = click.option(
    "--claims",
    "claims_path",
    type=click.Path(path_type=Path),
    help="Claims file (default: the launch/claims/*.yaml naming the first run's profile, else "
    "cpu-tiny.yaml for CPU runs, glm53-blog.yaml for GPU runs).",
)
_DB = click.option(
    "--db",
    "history_path",
    type=click.Path(path_type=Path),
    envvar="REPRO_HISTORY",
    help="History database (default results/history.sqlite; env REPRO_HISTORY).",
)


def _exit(code: int) -> None:
    # sys.exit, not ctx.exit: the group runs with standalone_mode=False, where click turns
    # ctx.exit(n) into a return value that harness.cli.main does not pass on.
    if code:
        sys.exit(code)


def _guard_markdown(path: Path | None) -> None:
    """Before judging: --markdown never lands on a run's record (e.g. RUN/manifest.json)."""
    if path is not None:
        from harness.results import check_not_run_record

        check_not_run_record(path, "--markdown")


def _write_markdown(path: Path | None, text: str) -> None:
    if path is not None:
        from harness.results import atomic_write_text

        atomic_write_text(path, text)
        click.echo(f"markdown written to {path}", err=True)


@click.command("regress")
@click.option("--candidate", required=True, type=_RUN, help="Run directory to judge.")
@click.option("--baseline", type=_RUN, help="Baseline run directory (instead of the history).")
@text_option(
    "--history",
    "history_key",
    metavar="KEY",
    help="Baseline = median of the last N accepted runs with this history key (`auto`, the default without --baseline: the candidate's own key).",
)
@path_option(
    "--policy",
    help="Regression policy file (default: launch/policies/cpu.yaml for CPU profiles, default.yaml for GPU arms).",
)
@_DB
@flag("--json", "as_json", help="Print the verdict as JSON.")
@path_option("--markdown", help="Also write the verdict as markdown (PR comment / job summary).")
@click.option(
    "--all-rows/--flagged-only",
    default=True,
    show_default=True,
    help="Terminal table: every row, or only rows that are not ok.",
)
def regress_cmd(
    candidate: Path,
    baseline: Path | None,
    history_key: str | None,
    policy: Path | None,
    history_path: Path | None,
    as_json: bool,
    markdown: Path | None,
    all_rows: bool,
) -> None:
    """Judge CANDIDATE per point and metric: ok / improvement / suspicious / regression.

    Exit code 1 when anything is a regression, 0 otherwise, 2 when the inputs are invalid or
    not comparable (different workload or dataset, invalid or missing points). The rules are in
    `harness/gate/regress.py`'s docstring; thresholds in the policy file.
    """
    from harness.gate.judge import regress
    from harness.gate.regress import render_json, render_markdown, render_table

    _guard_markdown(markdown)
    verdict = regress(
        candidate,
        baseline_dir=baseline,
        history_key=history_key,
        policy_path=policy,
        history_path=history_path,
    )
    click.echo(render_json(verdict) if as_json else render_table(verdict, all_rows=all_rows))
    _write_markdown(markdown, render_markdown(verdict))
    _exit(verdict.exit_code)


@click.group("claims")
def claims_group() -> None:
    """Check the blog's claims (launch/claims/*.yaml) against runs."""


def _parse_arm(values: tuple[str, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for value in values:
        arm, sep, run = value.partition("=")
        if not sep or not arm or not run:
            raise click.BadParameter(f"{value!r}: expected ARM=RUN_DIR", param_hint="--arm")
        out[arm] = Path(run)
    return out


@claims_group.command("check")
@click.argument("runs", nargs=-1, type=_RUN)
@_CLAIMS
@click.option(
    "--arm",
    "arms",
    multiple=True,
    metavar="ARM=RUN",
    help="Map an arm to a run explicitly (repeatable); otherwise by profile name.",
)
@flag("--json", "as_json", help="Print results as JSON.")
@path_option("--markdown", help="Also write a markdown table.")
@text_option(
    "--slo",
    metavar="OBJECTIVES",
    help="Judge goodput_rps / slo_attainment (and point 'slo') under these objectives, e.g. "
    "ttft=2s,tpot=50ms, recomputed from the per-request tables (default: as recorded).",
)
def claims_check(
    runs: tuple[Path, ...],
    claims_path: Path | None,
    arms: tuple[str, ...],
    as_json: bool,
    markdown: Path | None,
    slo: str | None,
) -> None:
    """Say which claims hold for RUNS. Exit 1 if any fails, 2 if none applies."""
    from harness.analysis.slo import parse_slo
    from harness.gate.claims import claims_exit_code, claims_to_dict, render_claims, run_claims

    _guard_markdown(markdown)
    objectives = parse_slo(slo, source="--slo") if slo is not None else None
    results, notes = run_claims(
        runs, claims_path=claims_path, explicit=_parse_arm(arms), objectives=objectives
    )
    if as_json:
        click.echo(json.dumps({"notes": notes, "claims": claims_to_dict(results)}, indent=2))
    else:
        click.echo(render_claims(results, notes))
    _write_markdown(markdown, render_claims(results, notes, markdown=True))
    _exit(claims_exit_code(results))


@click.group("history")
def history_group() -> None:
    """The append-only run history (accepted / rejected runs per key)."""


def _when(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).strftime("%Y-%m-%d %H:%M")


@history_group.command("list")
@text_option("--key", help="Only this history key.")
@click.option("--state", type=click.Choice(["accepted", "rejected"]), help="Only this state.")
@click.option("--json", "as_json", is_flag=True)
@_DB
def history_list(
    key: str | None, state: str | None, as_json: bool, history_path: Path | None
) -> None:
    """List recorded runs with their current state (latest event)."""
    from harness.gate.history import History

    entries = History.open(history_path).entries(key=key, state=state)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "ref": e.ref,
                        "run_id": e.run_id,
                        "run_dir": e.run_dir,
                        "key": e.key,
                        "build": e.build,
                        "build_commit": e.build_commit,
                        "created_at": e.created_at,
                        "state": e.state,
                        "reason": e.reason,
                    }
                    for e in entries
                ],
                indent=2,
            )
        )
        return
    if not entries:
        click.echo("history is empty" + (f" for key {key}" if key else ""))
        return
    for e in entries:
        click.echo(
            f"#{e.ref:<4} {_when(e.created_at)}  {e.state:8}  {e.run_id}  [{e.key}]  "
            f"build {e.build or '-'}  ({e.reason})"
        )


@history_group.command("show")
@click.argument("ref")
@_DB
def history_show(ref: str, history_path: Path | None) -> None:
    """Show one run (REF: #id, run id or run directory) and all its events."""
    from harness.gate.history import History

    history = History.open(history_path)
    e = history.entry(ref.lstrip("#"))
    click.echo(
        f"#{e.ref} {e.run_id}\n  dir: {e.run_dir}\n  key: {e.key}\n  profile: {e.profile}"
        f"\n  build: {e.build} {e.build_commit or ''}\n  created: {_when(e.created_at)}"
        f"\n  state: {e.state} ({e.reason})\n  points: "
        + ", ".join(
            f"{p['label']}r{p['repeat']}{'' if p['valid'] else ' (invalid)'}" for p in e.points
        )
    )
    for ev in history.events(str(e.ref)):
        click.echo(f"  {_when(ev['at'])}  {ev['state']:8}  by {ev['actor']}: {ev['reason']}")


def _set_state(
    ref: str, state: str, reason: str, history_path: Path | None, *, force: bool = False
) -> None:
    from harness.analysis.groups import point_rows
    from harness.gate.history import History, baseline_problem
    from harness.results import load_run

    history = History.open(history_path)
    path = Path(ref)
    run = load_run(path) if path.is_dir() and (path / "manifest.json").is_file() else None
    if state == "accepted":
        if run is not None:
            problem = baseline_problem(run.manifest.model_dump(mode="json"), point_rows(run))
        else:
            entry = history.entry(ref.lstrip("#"))
            problem = baseline_problem(entry.manifest, entry.points)
        if problem and not force:
            raise ReproError(f"{ref}: not accepted as a baseline: {problem} (--force to accept)")
        if problem:
            reason = f"{reason} [forced: {problem}]"
    if run is not None:
        entry = history.record(run, state=state, reason=reason)  # recorded if new
    else:
        entry = history.set_state(ref.lstrip("#"), state, reason)
    click.echo(f"#{entry.ref} {entry.run_id}: {entry.state} [{entry.key}]")


@history_group.command("accept")
@click.argument("ref")
@click.option("--reason", default="accepted by hand", show_default=True)
@flag(
    "--force",
    help="Accept a run that is not complete or has no valid point (recorded in the reason).",
)
@_DB
def history_accept(ref: str, reason: str, force: bool, history_path: Path | None) -> None:
    """Accept a run (REF: #id, run id, or a run directory, recorded if new) as a baseline.

    A failed, partial or empty run (status not complete, or no valid point) is refused unless
    --force is given."""
    _set_state(ref, "accepted", reason, history_path, force=force)


@history_group.command("reject")
@click.argument("ref")
@click.option("--reason", default="rejected by hand", show_default=True)
@_DB
def history_reject(ref: str, reason: str, history_path: Path | None) -> None:
    """Reject a run: it stays in the history, visible as rejected, never used as a baseline."""
    _set_state(ref, "rejected", reason, history_path)


_SIM_ONLY = ("calibration", "dataset", "points", "accepted", "accept", "reason")


@click.command("nightly")
@click.option(
    "--engine",
    type=click.Choice(["vllm", "sim"]),
    default="vllm",
    show_default=True,
    help="vllm: sweep real servers of --build. sim: `repro simulate` each arm (offline, "
    "deterministic) and gate it exactly against the accepted simulated history.",
)
@click.option("--profiles", metavar="A,B,...", help="Arms (profile names); sim: the four GLM arms.")
@click.option(
    "--build",
    help="vllm: build for every arm, e.g. nightly@latest (resolved to a commit first) or "
    "cpu-0.32.0 (required).",
)
@overrides_option(
    "Profile override for every arm (repeatable), as in `repro sweep --set`; part of the candidate, like the build: judged against the plain profile's history (e.g. a deliberately degraded server)."
)
@_CLAIMS
@path_option(
    "--policy",
    help="Regression policy file (default: launch/policies/cpu.yaml or default.yaml per arm).",
)
@path_option("--out", help="Parent of the run directories.")
@path_option(
    "--summary",
    "summary_path",
    help="Markdown summary path (default OUT/nightly-STAMP.md; also appended to $GITHUB_STEP_SUMMARY).",
)
@flag("--no-dashboard", help="Skip the HTML dashboard.")
@path_option(
    "--calibration",
    dir_okay=False,
    help="sim: calibration file [default: launch/calibrations/glm53-h200.yaml].",
)
@text_option("--dataset", metavar="RECIPE|FILE", help="sim: token counts [default: blog-shaped].")
@click.option(
    "--points",
    multiple=True,
    metavar="c1,c8",
    help="sim: only these points, against a history accepted with the same points (a point "
    "simulated alone starts from another engine state than in the whole sweep, so the "
    "committed history's entries report the others missing). Claims on other points fail.",
)
@path_option(
    "--accepted",
    dir_okay=False,
    help="sim: accepted simulated history [default: launch/history/sim-glm53-h200.jsonl].",
)
@flag("--accept", help="sim: append the new or changed arms to the accepted history.")
@text_option("--reason", help="sim: why the accepted values change (required with --accept).")
@executor_options
@_DB
def nightly_cmd(
    engine: str,
    profiles: str | None,
    build: str | None,
    overrides: tuple[str, ...],
    claims_path: Path | None,
    policy: Path | None,
    out: Path | None,
    summary_path: Path | None,
    no_dashboard: bool,
    history_path: Path | None,
    executor: str,
    **rest: Any,
) -> None:
    """Build -> sweep each arm -> verdict vs history (provisional points rerun once) -> claims
    -> dashboard + summary -> history. Exit 2 on errors, 1 on a regression or failed claim.
    An arm whose coherence reference has no recorded replies runs after that reference arm
    (which must then be among --profiles) and is judged against its run of the night.

    With --engine sim: simulate each GLM arm, compare every point value exactly with the
    arm's last accepted entry (a file in the repository), check the claims; exit 1 when a
    value changed or an arm has no accepted entry, unless --accept records the new values.
    """
    sim_opts = {k: rest.pop(k) for k in _SIM_ONLY}
    names = _arm_names(profiles)
    if claims_path is not None:
        from harness.gate.claims import load_claims

        # a claims file given by hand that cannot be read fails now, not as a note (exit 0)
        # after every arm has run
        load_claims(claims_path)
    if not engines.get(engine).served:  # the in-process simulator: the offline nightly
        from harness.cli.gate import given

        unused = {
            "--build": build,
            "--policy": policy,
            "--set": overrides,
            "--db": given("history_path"),  # REPRO_HISTORY set for the vllm nightly is fine
            "--executor slurm": executor != "local",
        }
        bad = [name for name, value in unused.items() if value]
        if bad:
            raise click.UsageError(f"{', '.join(bad)}: not used by --engine sim")
        if sim_opts["reason"] and not sim_opts["accept"]:
            raise click.UsageError("--reason: only with --accept (nothing is accepted without it)")
        _check_outputs(summary_path, sim_opts["accepted"] if sim_opts["accept"] else None)
        _exit(_sim_nightly(names, claims_path, out, summary_path, no_dashboard, sim_opts))
        return
    sim_only = [f"--{k}" for k, v in sim_opts.items() if v]
    if sim_only:
        raise click.UsageError(f"{', '.join(sim_only)}: only with --engine sim")
    if not names or not build:
        raise click.UsageError("--profiles and --build are required with --engine vllm")
    _check_outputs(summary_path, None)
    from harness.gate.nightly import run_nightly

    result = run_nightly(
        names,
        build,
        overrides=overrides,
        claims_path=claims_path,
        policy_path=policy,
        out=out,
        history_path=history_path,
        summary_path=summary_path,
        dashboard=not no_dashboard,
        echo=click.echo,
        slurm=options_from(executor, rest),  # --executor slurm: the arms run as Slurm jobs
    )
    _exit(result.exit_code)


def _arm_names(profiles: str | None) -> list[str]:
    """--profiles A,B: given but empty, or an arm twice, is a usage error (not the defaults)."""
    names = [p.strip() for p in (profiles or "").split(",") if p.strip()]
    if profiles is not None and not names:
        raise click.UsageError(f"--profiles {profiles!r}: no profile name in it")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise click.UsageError(f"--profiles: {', '.join(twice)} given twice")
    return names


def _check_outputs(summary: Path | None, accepted: Path | None) -> None:
    """The summary (+ its .json twin) and, with --accept, the accepted history are written
    after every arm has run: an unwritable path, or a run's record, fails now, before the work."""
    from harness.results import check_not_run_record, check_writable

    if summary is not None:
        for path in (summary, summary.with_suffix(".json")):
            check_not_run_record(path, "--summary")
    for output in (summary, accepted):
        if output is not None:
            check_writable(output)


def _sim_nightly(
    names: list[str],
    claims_path: Path | None,
    out: Path | None,
    summary_path: Path | None,
    no_dashboard: bool,
    opts: dict[str, Any],
) -> int:
    from harness.gate import simnight
    from harness.gate.history import DEFAULT_SIMULATED_HISTORY

    result = simnight.run_sim_nightly(
        names or simnight.GLM_ARMS,
        calibration=opts["calibration"] or simnight.DEFAULT_CALIBRATION,
        dataset=opts["dataset"],
        points=list(opts["points"]) or None,
        accepted_path=opts["accepted"] or DEFAULT_SIMULATED_HISTORY,
        accept=opts["accept"],
        reason=opts["reason"],
        claims_path=claims_path or simnight.DEFAULT_CLAIMS,
        out=out,
        summary_path=summary_path,
        dashboard=not no_dashboard,
        echo=click.echo,
    )
    return result.exit_code


def register(group: click.Group) -> None:
    """Add this area's commands to the `repro` group."""
    group.add_command(regress_cmd)
    group.add_command(claims_group)
    group.add_command(history_group)
    group.add_command(nightly_cmd)
