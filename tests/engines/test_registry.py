"""The registry's built-in engines, the manifest's engine record (old manifests included), and
the rule that no code outside `harness/engines/` branches on an engine's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness import engines
from harness.engines.sim_http import SimHttpArgs
from harness.engines.url import UrlArgs
from harness.errors import ConfigError
from harness.results import RunManifest
from harness.run.sweep import SweepRequest

HARNESS = Path(__file__).resolve().parents[2] / "harness"
NAMES = {"vllm", "url", "sim", "sim-http"}


def _name_comparisons(path: Path) -> list[str]:
    """`x == "sim"`, `"vllm" != x`, `x in ("vllm", "sim")`: a branch on an engine's name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for op, right in zip(node.ops, node.comparators, strict=True):
            left = sides[sides.index(right) - 1]
            if isinstance(op, ast.Eq | ast.NotEq):
                values = [s.value for s in (left, right) if isinstance(s, ast.Constant)]
            elif isinstance(op, ast.In | ast.NotIn) and isinstance(
                right, ast.Tuple | ast.List | ast.Set
            ):
                values = [e.value for e in right.elts if isinstance(e, ast.Constant)]
            else:
                continue
            if NAMES & {v for v in values if isinstance(v, str)}:
                out.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_engine_name_comparison_outside_the_engines_package():
    found = [
        hit
        for path in sorted(HARNESS.rglob("*.py"))
        if HARNESS / "engines" not in path.parents
        for hit in _name_comparisons(path)
    ]
    assert found == []


def test_the_check_finds_each_form_of_name_comparison(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        'a = engine == "sim"\nb = "vllm" != engine\nc = engine in ("url", "x")\n'
        'd = kind == "sim-http"\nok = policy == "offload"\n'
    )
    assert len(_name_comparisons(sample)) == 4


def test_built_in_engines_are_registered_with_their_record_names():
    assert set(engines.kinds()) >= NAMES
    assert {k: engines.get(k).record_name for k in NAMES} == {
        "vllm": "vllm",
        "url": "url",
        "sim-http": "sim",
        "sim": "sim",
    }
    assert engines.cli_choices()[:2] == ["vllm", "sim"]


def test_options_resolve_to_an_engine_and_its_typed_args():
    engine, args = SweepRequest("cpu-tiny", url="http://127.0.0.1:9").engine_choice()
    assert engine.kind == "url" and args == UrlArgs(url="http://127.0.0.1:9")
    request = SweepRequest(
        "hisparse384",
        engine="sim",
        time_scale=4,
        sim_args=["--fail-rate=0.1"],
        overrides=["sim.hbm_gib=10", "sweep.max_tokens=8"],
    )
    engine, args = request.engine_choice()
    assert engine.kind == "sim-http"
    assert args == SimHttpArgs(
        time_scale=4.0, sim_args=["--fail-rate=0.1"], overrides=["sim.hbm_gib=10"]
    )
    with pytest.raises(ConfigError, match=r"--set sim.PARAM=VALUE applies to --engine sim only"):
        SweepRequest("cpu-tiny", overrides=["sim.hbm_gib=10"])


def _manifest(**fields) -> dict:
    base = {
        "run_id": "r",
        "status": "complete",
        "created_at": 0.0,
        "harness_version": "0",
        "base_url": "http://127.0.0.1:8000",
        "profile_name": "p",
        "profile": {},
        "gpus": 1,
        "dataset": {},
        "workload_key": "k",
        "client": {},
        "sweep": {},
    }
    return {**base, **fields}


def test_old_manifests_get_their_engine_spec_and_resume_args():
    served = RunManifest.model_validate(
        _manifest(
            engine="sim",
            time_scale=4.0,
            overrides=["sim.hbm_gib=10", "sweep.max_tokens=8"],
            launch={"sim_args": ["--fail-rate=0.1"]},
        )
    )
    engine, args = engines.for_manifest(served)
    assert engine.kind == "sim-http" and served.simulated
    assert args == SimHttpArgs(
        time_scale=4.0, sim_args=["--fail-rate=0.1"], overrides=["sim.hbm_gib=10"]
    )
    offline = RunManifest.model_validate(_manifest(engine="sim", base_url="sim://"))
    assert engines.for_manifest(offline)[0].kind == "sim" and offline.simulated
    attached = RunManifest.model_validate(_manifest(engine="url"))
    assert engines.for_manifest(attached)[0].kind == "url" and not attached.simulated
    real = RunManifest.model_validate(_manifest(engine="vllm"))
    assert engines.for_manifest(real)[0].kind == "vllm"


def test_a_url_manifest_of_an_older_harness_resumes_against_its_base_url():
    old = RunManifest.model_validate(_manifest(engine="url", base_url="http://10.0.0.2:8000"))
    engine, args = engines.for_manifest(old)
    assert engine.attached_url(args) == "http://10.0.0.2:8000"


def test_the_in_process_simulator_has_no_server_to_start():
    with pytest.raises(ConfigError, match="repro simulate"):
        engines.get("sim").start(None, engines.get("sim").args_model(), None)  # type: ignore[arg-type]
