"""The coherence check of one arm: probes -> replies -> judges -> one `CoherenceRecord`.

Verdict: any failed judge -> "incoherent"; otherwise any judge that could not decide (missing
reference, server error, no drafts, no spill) -> "unjudged"; otherwise "coherent".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from harness.coherence.client import (
    SPEC_COUNTERS,
    Reply,
    count_tokens,
    read_counters,
    run_probes,
    served_model,
)
from harness.coherence.grade import (
    Check,
    judge_acceptance,
    judge_agreement,
    judge_answers,
    judge_garbage,
)
from harness.coherence.needle import plan_needle, run_needle
from harness.coherence.probes import ProbeSet, load_probe_set
from harness.coherence.store import (
    ReplySet,
    check_matches,
    read_replies,
    reference_path,
    write_replies,
)
from harness.errors import ConfigError, ReproError
from harness.results import CoherenceRecord, atomic_write_json
from harness.serve.profiles import CoherenceSpec, Profile, load_profile

RUN_REPLIES = Path("coherence") / "replies.json"
RUN_RESULT = Path("coherence") / "result.json"


@dataclass
class CheckPlan:
    """Everything the check will use, resolved without a server (what --dry-run prints)."""

    profile: str
    spec: CoherenceSpec
    probe_set: ProbeSet
    reference: str | None  # label: an arm name or a run directory
    reference_file: Path | None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        ref = "none (a reference arm: records, compares nothing)"
        if self.reference:
            state = (
                "present" if self.reference_file and self.reference_file.is_file() else "MISSING"
            )
            ref = f"{self.reference} ({self.reference_file}, {state})"
        band = self.spec.acceptance
        ps = self.probe_set
        head = (
            f"profile {self.profile}: probe set {ps.key} ({len(ps.probes)} probes, {ps.api}, "
            f"max_tokens {ps.max_tokens}, sha256 {ps.sha256[:12]})"
        )
        out = [
            head,
            f"reference: {ref}",
            f"agreement: {self.spec.agreement.model_dump()}",
            f"garbage: {self.spec.garbage.model_dump()}",
            f"acceptance band: {band.model_dump() if band else 'none'}",
            (
                "long context: "
                + (str(self.spec.long_context.model_dump()) if self.spec.long_context else "none")
            ),
        ]
        return out + [f"note: {n}" for n in self.notes]


def _speculative(profile: Profile) -> bool:
    return bool(profile.serve.get("speculative-config"))


def plan_check(
    profile: Profile, *, against: str | None = None, references_dir: Path | None = None
) -> CheckPlan:
    """Validate the block against the profile and resolve probe set and reference."""
    spec = profile.coherence
    if spec is None:
        raise ConfigError(f"{profile.source}: profile {profile.name} has no coherence: block")
    probe_set = load_probe_set(spec.probes)
    notes: list[str] = []
    if spec.acceptance is not None and not _speculative(profile):
        raise ConfigError(
            f"{profile.source}: coherence.acceptance: a band needs serve.speculative-config"
        )
    if spec.acceptance is None and _speculative(profile):
        notes.append("speculative decoding without an acceptance band: acceptance not judged")
    if spec.agreement.min_prefix > spec.agreement.tokens:
        raise ConfigError(
            f"{profile.source}: coherence.agreement.min_prefix {spec.agreement.min_prefix} > "
            f"tokens {spec.agreement.tokens}"
        )
    if spec.agreement.tokens > probe_set.max_tokens:
        raise ConfigError(
            f"{profile.source}: coherence.agreement.tokens {spec.agreement.tokens} > probe set "
            f"{probe_set.key} max_tokens {probe_set.max_tokens}"
        )
    target = against if against is not None else spec.reference
    if target is None:
        return CheckPlan(profile.name, spec, probe_set, None, None, notes)
    if target == profile.name:
        raise ConfigError(f"{profile.source}: coherence.reference: an arm cannot be its own")
    run_dir = Path(target).expanduser()
    if run_dir.is_dir():
        return CheckPlan(profile.name, spec, probe_set, str(run_dir), run_dir / RUN_REPLIES, notes)
    try:
        load_profile(target)
    except ConfigError as exc:
        where = "--against" if against is not None else f"{profile.source}: coherence.reference"
        raise ConfigError(f"{where} {target!r}: not a run directory, and {exc}") from None
    path = reference_path(target, probe_set.key, references_dir)
    return CheckPlan(profile.name, spec, probe_set, target, path, notes)


Verdict = Literal["coherent", "incoherent", "unjudged"]


def _verdict(checks: dict[str, Check]) -> tuple[Verdict, str]:
    failed = [c.reason for c in checks.values() if c.status == "fail"]
    if failed:
        return "incoherent", "; ".join(failed)
    unjudged = [c.reason for c in checks.values() if c.status == "unjudged"]
    if unjudged:
        return "unjudged", "could not judge: " + "; ".join(unjudged)
    return "coherent", "; ".join(c.reason for c in checks.values())


def load_reference(plan: CheckPlan) -> ReplySet | Check:
    assert plan.reference_file is not None
    if not plan.reference_file.is_file():
        hint = f"record it with `repro coherence --profile {plan.reference} --record`"
        if Path(str(plan.reference)).is_dir():
            hint = "that run has no coherence replies"
        return Check(
            status="unjudged",
            reason=f"no recorded replies of {plan.reference} for probe set "
            f"{plan.probe_set.key} ({plan.reference_file}); {hint}",
        )
    try:
        replies = read_replies(plan.reference_file)
        check_matches(replies, plan.probe_set, plan.reference_file)
    except ConfigError as exc:
        return Check(status="unjudged", reason=str(exc))
    return replies


def _agreement(plan: CheckPlan, replies: list, profile: Profile, root: str | None) -> Check:
    ref = load_reference(plan)
    if isinstance(ref, Check):
        return ref
    check = judge_agreement(replies, ref.by_id(), plan.spec.agreement, str(plan.reference))
    check.details["reference_model_root"] = ref.model_root
    if ref.model == profile.model and ref.model_root and root and ref.model_root != root:
        # e.g. a rebuilt tiny model: the stored reference may be stale rather than the arm wrong
        check.details["note"] = f"reference served {ref.model_root}, this arm serves {root}"
    return check


def _judge(
    profile: Profile,
    plan: CheckPlan,
    base_url: str,
    model: str,
    root: str | None,
    long_context: bool,
) -> tuple[dict[str, Check], list[Reply]]:
    spec, probe_set = plan.spec, plan.probe_set
    checks: dict[str, Check] = {}
    before = read_counters(base_url, SPEC_COUNTERS.values())
    replies = run_probes(base_url, probe_set, model, timeout_s=spec.timeout_s)
    after = read_counters(base_url, SPEC_COUNTERS.values())
    if plan.reference is not None:
        checks["agreement"] = _agreement(plan, replies, profile, root)
    checks["garbage"] = judge_garbage(replies, spec.garbage)
    expects = {p.id: p.expect for p in probe_set.probes}
    checks["answers"] = judge_answers(replies, expects, spec.min_answers)
    checks["acceptance"] = judge_acceptance(before, after, spec.acceptance, SPEC_COUNTERS)
    if spec.long_context is not None and long_context:
        max_len = profile.serve.get("max-model-len")
        needle = plan_needle(
            spec.long_context,
            lambda text: count_tokens(base_url, model, text),
            max_model_len=int(max_len) if max_len else None,
        )
        checks["long_context"] = run_needle(
            base_url, probe_set, model, needle, timeout_s=spec.timeout_s
        )
    return checks, replies


def run_check(
    profile: Profile,
    base_url: str,
    *,
    against: str | None = None,
    references_dir: Path | None = None,
    record: bool = False,
    out_dir: Path | None = None,
    allow_incoherent: bool = False,
    long_context: bool = True,
) -> CoherenceRecord:
    """Probe the live server at base_url as arm `profile` and judge it.

    record: store the replies as this arm's reference for the probe-set version.
    out_dir: also write <out_dir>/coherence/{replies,result}.json (a run directory).
    """
    plan = plan_check(profile, against=against, references_dir=references_dir)
    base_url = base_url.rstrip("/").removesuffix("/v1")
    started = time.time()
    checks: dict[str, Check] = {}
    replies: list[Reply] = []
    root = None
    try:
        model, root = served_model(base_url)
        checks, replies = _judge(profile, plan, base_url, model, root, long_context)
    except (ReproError, KeyError, ValueError) as exc:
        checks["server"] = Check(status="unjudged", reason=f"probing {base_url} failed: {exc}")
    verdict, reason = _verdict(checks)
    result = CoherenceRecord(
        verdict=verdict,
        reason=reason,
        profile=profile.name,
        probe_set=plan.probe_set.key,
        reference=plan.reference,
        allow_incoherent=allow_incoherent,
        checks={name: c.model_dump(mode="json") for name, c in checks.items()},
        started_at=started,
        finished_at=time.time(),
    )
    reply_set = None
    if replies:
        reply_set = ReplySet(
            arm=profile.name,
            probe_set=plan.probe_set.key,
            probe_set_sha256=plan.probe_set.sha256,
            build=profile.build,
            model=profile.model,
            model_root=root,
            base_url=base_url,
            replies=replies,
        )
    if record and reply_set is not None:
        write_replies(reference_path(profile.name, plan.probe_set.key, references_dir), reply_set)
    if out_dir is not None:
        if reply_set is not None:
            write_replies(Path(out_dir) / RUN_REPLIES, reply_set)
        atomic_write_json(Path(out_dir) / RUN_RESULT, result)
    return result


def check_for_sweep(
    profile: Profile,
    base_url: str,
    *,
    allow_incoherent: bool,
    run_dir: Path | None = None,
    against: str | None = None,
) -> CoherenceRecord | None:
    """The sweep's hook, right after readiness and before the first point.

    None when the profile has no coherence: block. Otherwise the record for the manifest; when
    `record.invalidates_points`, every point of the arm is invalid with reason
    f"coherence: {record.reason}". Never raises for a bad server: that is an "unjudged" record.
    against: a run directory or arm instead of the profile's reference (--coherence-against).
    """
    if profile.coherence is None:
        return None
    return run_check(
        profile, base_url, against=against, out_dir=run_dir, allow_incoherent=allow_incoherent
    )


def point_invalid_reason(record: CoherenceRecord | None) -> str | None:
    """The reason every point of the arm gets when its check did not pass (None: points count).

    With --allow-incoherent the points count; the record (allow_incoherent=True) says why.
    """
    if record is None or not record.invalidates_points:
        return None
    return f"coherence {record.verdict}: {record.reason}"


def coherence_line(record: CoherenceRecord | None) -> str:
    """The arm's output-correctness verdict in one line (harness/coherence)."""
    if record is None:
        return "– (the profile has no coherence: block)"
    allowed = "; points counted anyway (--allow-incoherent)" if record.allow_incoherent else ""
    against = f" vs {record.reference}" if record.reference else ""
    return f"{record.verdict}{against}: {record.reason}{allowed}"
