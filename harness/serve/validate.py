"""`repro profiles check`: validate each profile's exact command, by the real vLLM where we can.

Per profile, in order of strength:
1. the harness table check (option names/kinds + keys inside JSON options), against the
   build's release table, generated from that release's own parser (on an installed build, or
   on its PyPI wheel: harness/data/vllm_serve_options/generate.py);
2. where a build of the same upstream release is installed here (the CPU 0.32.0 build), that
   vLLM's own argparser, `validate_parsed_serve_args` and config classes, in a subprocess of
   its venv (harness/serve/vllm_probe.py; no model load, no network);
3. fork builds keep their recorded fork-only surface (launch/builds.yaml), which no installed
   upstream parser can judge.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ConfigError
from harness.paths import PROFILES_DIR
from harness.serve.builds import (
    Build,
    BuildEnv,
    _installed,
    _quiet_env,
    get_build,
    load_builds,
    serve_table,
)
from harness.serve.checks import Check
from harness.serve.profiles import Profile, json_key_problems, load_profile, render_serve_command

PROBE = Path(__file__).with_name("vllm_probe.py")
MARKER = "@@REPRO-PROBE@@"
PROBE_TIMEOUT_S = 600.0


@dataclass
class ProfileReport:
    name: str
    build: str
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)


def _release(version: str | None) -> str | None:
    return version.split("+")[0] if version else None


def parser_release(build: Build) -> str | None:
    """The upstream release whose parser judges this build's (upstream) options.

    A fork is judged, minus its fork-only options, by the release of its option table; an
    upstream commit of unrecorded release by none.
    """
    if build.kind == "source":
        return build.serve_options
    return build.vllm_version


def parser_env_for(build: Build) -> BuildEnv | None:
    """An installed upstream build of the release `parser_release(build)`."""
    release = parser_release(build)
    if not release:
        return None
    for name, declared in load_builds().items():
        env = _installed(name)
        if env is None or declared.kind == "source":
            continue
        installed = _release((env.provenance.get("versions") or {}).get("vllm"))
        if installed == release:
            return env
    return None


def probe_argv(profile: Profile, build: Build) -> list[str]:
    """The words after `vllm serve`, without the fork-only options (no upstream parser has them)."""
    serve = {k: v for k, v in profile.serve.items() if k not in build.extra_serve_options}
    return render_serve_command(profile.model_copy(update={"serve": serve}))[2:]


def run_probe(env: BuildEnv, argvs: Sequence[Sequence[str]]) -> list[dict]:
    """Results of vllm_probe.py for each argv (words after `vllm serve`), in one process."""
    run_env = {**_quiet_env(), "VLLM_LOGGING_LEVEL": "ERROR"}
    if env.provenance.get("device") == "cpu":
        run_env["VLLM_TARGET_DEVICE"] = "cpu"
    try:
        proc = subprocess.run(
            [str(env.python), str(PROBE)],
            input=json.dumps({"argvs": [list(a) for a in argvs]}),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=run_env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(
            f"{env.name}: vLLM probe timed out after {PROBE_TIMEOUT_S:.0f} s"
        ) from exc
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            return list(json.loads(line[len(MARKER) :]))
    tail = "\n".join(proc.stderr.splitlines()[-15:])
    raise ConfigError(f"{env.name}: vLLM probe failed (exit {proc.returncode}):\n{tail}")


def _static_checks(profile: Profile, build: Build) -> list[Check]:
    table = serve_table(build)
    checks = [Check("table", "ok", f"names, kinds and JSON keys vs {table.label}")]
    if build.kind in ("commit-wheel", "nightly") and not build.vllm_version:
        checks.append(
            Check(
                "table-provenance",
                "warn",
                f"build {build.name} is an upstream commit of unrecorded release; checked "
                f"against the nearest table {table.version}",
                f"set builds.{build.name}.vllm_version once installed (`vllm --version`)",
            )
        )
    _errors, warnings = json_key_problems(profile, build)
    for text in warnings:
        checks.append(
            Check(
                "fork-surface" if build.kind == "source" else "json-keys",
                "warn",
                text,
                f"not in the surface recorded for {build.name} (launch/builds.yaml)",
            )
        )
    if build.kind == "source":
        recorded = ", ".join(sorted(build.extra_serve_options)) or "none"
        checks.append(
            Check(
                "fork-surface",
                "ok",
                f"fork build {build.name}: fork-only options {recorded} checked against the "
                "recorded surface; no installed parser of this fork",
            )
        )
    return checks


def check_profiles(names: Sequence[str], *, real: bool = True) -> list[ProfileReport]:
    """One report per profile; the real-parser step runs once per installed build."""
    reports: list[ProfileReport] = []
    pending: dict[str, list[tuple[ProfileReport, list[str]]]] = {}
    envs: dict[str, BuildEnv] = {}
    for name in names:
        try:
            profile = load_profile(name)
        except ConfigError as exc:
            reports.append(ProfileReport(name, "?", [Check("load", "fail", str(exc))]))
            continue
        build = get_build(profile.build)
        report = ProfileReport(profile.name, build.name, _static_checks(profile, build))
        reports.append(report)
        env = parser_env_for(build) if real else None
        if env is None:
            if real:
                release = parser_release(build) or "(unrecorded release)"
                report.checks.append(
                    Check("vllm-parser", "skip", f"no installed build of vLLM {release}")
                )
            continue
        envs[env.name] = env
        pending.setdefault(env.name, []).append((report, probe_argv(profile, build)))
    for env_name, items in pending.items():
        results = run_probe(envs[env_name], [argv for _, argv in items])
        for (report, _), result in zip(items, results, strict=True):
            build = get_build(report.build)
            report.checks.append(_probe_check(env_name, result, build))
    return reports


def _probe_check(env_name: str, result: dict, build: Build) -> Check:
    where = f"vLLM {result.get('vllm_version')} ({env_name})"
    if build.extra_serve_options:
        where += f", fork-only {', '.join(sorted(build.extra_serve_options))} left out"
    if result.get("ok"):
        return Check("vllm-parser", "ok", f"{where}: {', '.join(result.get('checked', []))}")
    return Check(
        "vllm-parser",
        "fail",
        f"{where} rejects the command: {'; '.join(result.get('errors', []))}",
        "fix the profile's serve: block (`repro profiles show NAME --command`)",
    )


def all_profile_names() -> list[str]:
    return [p.stem for p in sorted(PROFILES_DIR.glob("*.yaml"))]
