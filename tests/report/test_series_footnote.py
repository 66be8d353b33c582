"""The figure footnote reads the output length from the run's typed configuration (its stored
`run_config`), and from the sweep as written for a record too partial to derive one from."""

from __future__ import annotations

from pathlib import Path

from support.manifests import minimal_manifest

from harness.engine_spec import EngineSpec
from harness.report.series import footnote
from harness.results import PointRecord, RunLayout, atomic_write_json, load_run
from harness.run.config import build_run_config
from harness.serve.profiles import load_profile


def _run(root: Path, **fields) -> Path:
    layout = RunLayout(root)
    atomic_write_json(layout.manifest, minimal_manifest(run_id=root.name, **fields))
    point = PointRecord(
        point_id="p001-n0002-r0",
        label="c1",
        parallel=1,
        number=2,
        dataset_offset=0,
        conversations=[0, 1],
        turns=3,
        expected_requests=6,
        started_at=0.0,
        ended_at=1.0,
        window=(0.0, 1.0),
        valid=True,
    )
    atomic_write_json(layout.point_json(point.point_id), point)
    return root


def test_the_output_length_comes_from_the_run_configuration(tmp_path):
    profile = load_profile("cpu-tiny", ["sweep.max_tokens=77", "sweep.ignore_eos=false"])
    config = build_run_config(engine=EngineSpec(kind="url"), profile=profile, overrides=[])
    # the manifest's own sweep says otherwise: the configuration is what the client was given
    run = _run(
        tmp_path / "a",
        run_config=config.model_dump(mode="json"),
        sweep={"max_tokens": 5, "ignore_eos": True},
    )
    note = footnote([load_run(run)], "blog")
    assert note.startswith("Each point: 3-turn workload, up to 77-token outputs.")


def test_a_partial_record_reads_its_sweep_as_written(tmp_path):
    run = _run(tmp_path / "b", sweep={"max_tokens": 220, "ignore_eos": True})
    note = footnote([load_run(run)], "blog")
    assert note.startswith("Each point: 3-turn workload, fixed 220-token outputs.")
