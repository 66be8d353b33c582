"""The report warns about different workloads only when the client replayed different ones:
the simulated blog arms differ in serve flags (their configuration keys differ) and replay the
same workload, so no warning (issue 23's symptom)."""

from __future__ import annotations

from pathlib import Path

from harness.report.dashboard import render_report, run_workload_id
from harness.results import load_run
from harness.sim.run import run_simulation

SETS = ["sweep.points=[[1,2]]", "sweep.dataset_offset=0", "sweep.scrape_interval_s=2"]
WARNING = "replayed different workloads"


def test_arms_that_differ_only_in_their_servers_are_comparable(tmp_path: Path) -> None:
    recipe = tmp_path / "small.yaml"
    recipe.write_text(
        "number: 4\nnum_turns: 2\nfirst_turn_length: 20000\nsubsequent_turn_length: 500\n"
    )

    def simulate(profile: str, rid: str, *extra: str):
        run_dir = run_simulation(
            profile, dataset=str(recipe), overrides=[*SETS, *extra], out=tmp_path, run_id=rid
        )
        return load_run(run_dir)

    hisparse = simulate("hisparse384", "h")
    offload = simulate("offload512", "o")
    assert (
        hisparse.manifest.configuration_key != offload.manifest.configuration_key
    )  # the servers differ
    assert run_workload_id(hisparse) == run_workload_id(offload)
    assert WARNING not in render_report([hisparse, offload])

    longer = simulate("offload512", "o-longer", "sweep.max_tokens=300")
    assert run_workload_id(longer) != run_workload_id(offload)
    html = render_report([hisparse, longer])
    assert WARNING in html and run_workload_id(longer) in html
