"""Think time through the real pinned EvalScope (the `repro_think` API plugin) and the real
sweep pipeline, against the loopback fake OpenAI server: every turn after the first of a
conversation starts after its drawn pause, and no request's times contain it. Assertions are on
the recorded timestamps (the pause log and EvalScope's sqlite), never on wall-clock bounds.
"""

from __future__ import annotations

from support.fake_openai import SETS
from support.think_time import check_report_and_claims, check_think_time_run

from harness.analysis.request_table import read_table
from harness.client.evalscope import ClientArgs, client_command
from harness.dataset.thinktime import ThinkTime
from harness.results import load_run
from harness.run.sweep import SweepRequest, run_sweep

THINK = "sweep.think_time={kind: exponential, mean_s: 0.4, seed: 11, max_s: 1.5}"
THINK_MODEL = ThinkTime(kind="exponential", mean_s=0.4, seed=11, max_s=1.5)


def test_think_time_sweep_pauses_between_turns_and_never_inside_a_request(
    fake_server, small_dataset, tmp_path
):
    sets = [s for s in SETS if not s.startswith("sweep.points")]
    sets += ["sweep.points=[[2,4]]", THINK, "sweep.slo=ttft=60s,tpot=5s"]
    run_dir = run_sweep(
        SweepRequest(
            "cpu-tiny",
            overrides=sets,
            dataset=str(small_dataset),
            url=fake_server(),
            out=tmp_path,
            run_id="think",
        ),
        echo=lambda _: None,
    )
    run = load_run(run_dir)
    (point,) = run.points
    assert point.valid, point.invalid_reasons
    assert "--api" in point.client_command and "repro_think" in point.client_command
    assert run.manifest.sweep["think_time"]["kind"] == "exponential"

    check_think_time_run(run_dir, point, THINK_MODEL, turns=2)
    table = read_table(run_dir / "points" / point.point_id / "requests.parquet")
    assert sorted(zip(table["conversation"], table["turn"], strict=True)) == [
        (c, t) for c in range(4) for t in (1, 2)
    ]
    assert point.metrics["slo_attainment"] is not None
    assert point.metrics["p50_ttft_ms"] is not None and point.metrics["p90_e2e_s"] is not None
    check_report_and_claims(run_dir, tmp_path, "cpu-tiny", parallel=2)


def test_no_think_time_keeps_the_blog_command(tmp_path):
    args = ClientArgs("m", "http://h:1", tmp_path / "d.json", 220, True, None, {})
    plain = client_command(
        args, parallel=8, number=16, dataset_offset=56, name="p", outputs_dir=tmp_path
    )
    zero = ClientArgs(
        "m", "http://h:1", tmp_path / "d.json", 220, True, None, {},
        think_time=ThinkTime(kind="fixed", seconds=0),
    )  # fmt: skip
    assert (
        client_command(
            zero, parallel=8, number=16, dataset_offset=56, name="p", outputs_dir=tmp_path
        )
        == plain
    )
    assert plain[0] == "evalscope" and plain[plain.index("--api") + 1] == "openai"
    paused = ClientArgs(
        "m", "http://h:1", tmp_path / "d.json", 220, True, None, {},
        think_time=ThinkTime(kind="fixed", seconds=5),
    )  # fmt: skip
    cmd = client_command(
        paused, parallel=8, number=16, dataset_offset=56, name="p", outputs_dir=tmp_path
    )
    perf = cmd[cmd.index("--") + 1 :]
    # the same EvalScope argv, only the API plugin differs
    assert perf == [*plain[1:plain.index("--api") + 1], "repro_think",
                    *plain[plain.index("--api") + 2 :]]  # fmt: skip
