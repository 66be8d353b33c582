"""Predicted vs measured on crafted run directories written with harness.results records."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness.capacity.figures import capacity_figures
from harness.capacity.measured import NoCapacityModel, compare_run
from harness.cli import cli
from harness.results import PointRecord, RunLayout, RunManifest, atomic_write_json, point_id
from harness.serve.profiles import load_profile

F, S, MAX_TOKENS, TURNS = 74160, 753, 220, 13  # the blog's recipe (docs/recipe.md §6.6, 6.8)


def _prompt_tokens(conversation: int, turn: int) -> int:
    # conversation k is 1,000 tokens longer than the recipe's context at every turn
    return F + 1000 * conversation + (turn - 1) * (S + MAX_TOKENS)


def _write_dataset(path: Path, conversations: int) -> Path:
    data = {
        "metadata": {"first_turn_length": F, "subsequent_turn_length": S, "num_turns": TURNS},
        "conversations": [
            [
                {
                    "messages": [{"role": "user", "content": "x"}],
                    "prompt_tokens": _prompt_tokens(k, t),
                }
                for t in range(1, TURNS + 1)
            ]
            for k in range(conversations)
        ],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _write_run(
    root: Path,
    profile: str,
    points: list[tuple[int, list[int], float | None]],
    *,
    dataset: dict[str, Any],
    host: dict[str, Any] | None = None,
    launch: dict[str, Any] | None = None,
) -> Path:
    prof = load_profile(profile)
    layout = RunLayout(root)
    now = time.time()
    manifest = RunManifest(
        run_id=root.name,
        status="complete",
        created_at=now,
        finished_at=now,
        harness_version="test",
        engine="vllm",
        base_url="http://127.0.0.1:8000",
        profile_name=prof.name,
        profile=prof.model_dump(mode="json"),
        gpus=max(prof.gpus, 1),
        dataset=dataset,
        workload_key="k",
        client={"name": "evalscope", "version": "1.7.0"},
        host=host or {},
        sweep=prof.sweep.model_dump(mode="json"),
        launch=launch,
    )
    atomic_write_json(layout.manifest, manifest)
    for parallel, conversations, occupancy in points:
        pid = point_id(parallel, len(conversations))
        record = PointRecord(
            point_id=pid,
            label=f"c{parallel}",
            parallel=parallel,
            number=len(conversations),
            dataset_offset=0,
            conversations=conversations,
            turns=TURNS,
            expected_requests=len(conversations) * TURNS,
            started_at=now,
            ended_at=now,
            window=(now, now),
            valid=True,
            metrics={} if occupancy is None else {"occupancy": occupancy},
        )
        atomic_write_json(layout.point_json(pid), record)
    return root


def test_hisparse_mtp3_run_with_per_turn_prompt_tokens(tmp_path: Path) -> None:
    dataset = _write_dataset(tmp_path / "openhands.json", 4)
    run = _write_run(
        tmp_path / "run-hisparse",
        "hisparse384",
        [(1, [0], 1.0), (32, [1, 2], 21.5)],
        dataset={"path": str(dataset), "sha256": "0" * 64, "manifest": {}},
        host={"gpus": [{"name": "NVIDIA H200"}]},
    )
    comparison = compare_run(run)
    dep = comparison.deployment
    assert comparison.hisparse and dep.gpu == "h200" and dep.tp == 8
    assert dep.spec_tokens == 3 and dep.mtp_rows == 10240  # speculative-config MTP3
    assert dep.host_pool_gib == 384.0 and dep.max_seqs == 256
    c1, c32 = comparison.points
    # c1 replays conversation 0: mean context 74,160 + 6 x 973 = 79,998; max 74,160 + 12 x 973
    assert c1.mean_context == 79998 and c1.max_context == 85836
    # seq = 79,998 + 220 = 80,218 -> ceil(/64) = 1254; MTP3 pages 1254 + 3200 + 40 = 4494;
    # 103,692 // 4494 = 23 (host: 143,395 blocks // 1254 = 114; max-num-seqs 256)
    assert c1.predicted_at_mean == 23
    # 85,836 + 220 = 86,056 -> 1345; 1345 + 3240 = 4585; 103,692 // 4585 = 22
    assert c1.predicted_at_max == 22
    assert c1.bound == 1 and c1.ratio_to_bound == 1.0
    # c32 replays conversations 1 and 2: mean 79,998 + 1,500 = 81,498 -> 81,718 -> 1277 pages;
    # 1277 + 3240 = 4517; 103,692 // 4517 = 22. Max 85,836 + 2,000 + 220 = 88,056 -> 1376 -> 22
    assert c32.mean_context == 81498 and c32.predicted_at_mean == 22
    assert c32.predicted_at_max == 22
    assert c32.measured == 21.5 and c32.ratio == pytest.approx(21.5 / 22)
    assert comparison.workload.source.startswith("prompt_tokens in")


def test_baseline_arm_from_recipe_numbers(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run-offload",
        "offload512",
        [(32, list(range(32)), 5.6)],
        dataset={
            "path": str(tmp_path / "missing.json"),
            "sha256": "0" * 64,
            "manifest": {"first_turn_length": F, "subsequent_turn_length": S, "num_turns": TURNS},
        },
    )
    comparison = compare_run(run)
    assert not comparison.hisparse
    assert comparison.workload.source.startswith("recipe")
    # context(t) = 74,160 + (t - 1)(753 + 220): mean over 13 turns 79,998, last 85,836
    assert comparison.workload.turn_contexts[0] == F
    assert comparison.workload.turn_contexts[-1] == 85836
    assert comparison.workload.mean_context == 79998
    (point,) = comparison.points
    # GPU-resident: 6260 blocks // ceil(80,218 / 64) = 1254 -> 4; // 1345 -> 4
    assert point.predicted_at_mean == 4 and point.predicted_at_max == 4
    assert point.ratio == pytest.approx(5.6 / 4)
    # before flooring: 6260 / 1254 = 4.992, what a mix of lengths averages (the blog measured 4.9)
    assert point.fluid_at_mean == pytest.approx(6260 / 1254)
    assert any("assuming H200" in n for n in comparison.notes)


def test_vllm_pool_lines_are_compared(tmp_path: Path) -> None:
    # vLLM's own pools, from the launch record (harness.serve.provenance.kv_capacity_lines)
    baseline = _write_run(
        tmp_path / "run-b",
        "offload512-nomtp",
        [(32, [0], 5.5)],
        dataset={
            "path": "",
            "sha256": "0" * 64,
            "manifest": {"first_turn_length": F, "subsequent_turn_length": S, "num_turns": TURNS},
        },
        launch={
            "kv_capacity": {
                "lines": ["GPU KV cache size: 480,000 tokens"],
                "kv_cache_tokens": 480000,
            }
        },
    )
    # 480,000 / 64 = 7500 blocks x 3,052,800 B / 2^30 = 21.3 GiB/GPU
    assert any(
        "21.3 GiB/GPU against the calculator's 17.8" in n for n in compare_run(baseline).notes
    )
    line = (
        "HiSparse HMA: 384.0 GiB host source (143,395 blocks), 16.5 GiB shared GPU "
        "indexer/resident/hot pool (96,000 blocks)"
    )
    hisparse = _write_run(
        tmp_path / "run-h",
        "hisparse384",
        [(32, [0], 20.0)],
        dataset={
            "path": "",
            "sha256": "0" * 64,
            "manifest": {"first_turn_length": F, "subsequent_turn_length": S, "num_turns": TURNS},
        },
        launch={"kv_capacity": {"lines": [line], "kv_cache_tokens": None}},
    )
    notes = compare_run(hisparse).notes
    assert any("HiSparse GPU pool: 96,000 pages (16.5 GiB)" in n for n in notes)
    assert not any("GPU KV cache of" in n for n in notes)


def test_workload_from_dataset_manifest_turn_list(tmp_path: Path) -> None:
    turns = [float(_prompt_tokens(0, t)) for t in range(1, TURNS + 1)]
    run = _write_run(
        tmp_path / "run-list",
        "hisparse384-nomtp",
        [(8, [0, 1], 7.9)],
        dataset={"path": "", "sha256": "0" * 64, "manifest": {"turn_prompt_tokens": turns}},
        host={"gpu": "NVIDIA B200"},
    )
    comparison = compare_run(run)
    assert comparison.workload.source == "dataset manifest"
    assert comparison.deployment.gpu == "b200"
    assert comparison.deployment.spec_tokens is None and comparison.deployment.hot_rows == 4096
    # B200: toFixed(180e9/2^30 x 0.92 - 87.965375 - 15, 1) = toFixed(51.2616, 1) = 51.3
    assert comparison.deployment.kv_gib_per_gpu == 51.3
    (point,) = comparison.points
    # floor(51.3 x 2^30 / 184,320) = 298844 pages; 1254 + 1280 + 40 = 2574 -> 116 requests,
    # host 384 GiB: 143,395 // 1254 = 114 -> the host pool limits; bound min(8, 114) = 8
    assert point.predicted_at_mean == 114
    assert point.bound == 8 and point.ratio_to_bound == pytest.approx(7.9 / 8)


def test_tiny_model_has_no_capacity_model(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "run-tiny",
        "cpu-tiny",
        [(1, [0], 1.0)],
        dataset={"path": "", "sha256": "0" * 64, "manifest": {}},
    )
    with pytest.raises(
        NoCapacityModel, match="no capacity model applies to model 'tiny:tiny-llama'"
    ):
        compare_run(run)
    result = CliRunner().invoke(cli, ["capacity", "--run", str(run)], standalone_mode=False)
    assert isinstance(result.exception, NoCapacityModel)


def test_cli_run_text_json_and_plot(tmp_path: Path) -> None:
    dataset = _write_dataset(tmp_path / "openhands.json", 4)
    run = _write_run(
        tmp_path / "run-cli",
        "hisparse384",
        [(32, [1, 2], 21.5)],
        dataset={"path": str(dataset), "sha256": "0" * 64, "manifest": {}},
    )
    runner = CliRunner()
    text = runner.invoke(cli, ["capacity", "--run", str(run), "--gpu", "h200"])
    assert text.exit_code == 0, text.output
    assert "MTP3 hot buffers (10,240 rows)" in text.output
    line = next(x for x in text.output.splitlines() if x.startswith("c32"))
    # fluid: 103,692 / (1277 + 3240) = 22.96 (host 143,395 / 1277 = 112.3 does not limit)
    assert line.split()[2:] == [
        "32",
        "81,498",
        "87,836",
        "22",
        "22",
        "22.96",
        "22",
        "21.50",
        "0.98",
        "0.98",
    ]
    out = runner.invoke(cli, ["capacity", "--run", str(run), "--json"])
    data = json.loads(out.output)
    assert data["points"][0]["predicted_at_mean"] == 22
    assert data["capacity"][0]["seq_len"] == 81718  # 81,498 mean context + 220
    plot = tmp_path / "run.html"
    out = runner.invoke(cli, ["capacity", "--run", str(run), "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    assert "Measured occupancy" in plot.read_text(encoding="utf-8")
    refused = runner.invoke(
        cli, ["capacity", "--run", str(run), "--tp", "4"], standalone_mode=False
    )
    assert "drop --tp" in str(refused.exception)


def test_capacity_figures_for_a_run(tmp_path: Path) -> None:
    dataset = _write_dataset(tmp_path / "openhands.json", 4)
    run = _write_run(
        tmp_path / "run-fig",
        "hisparse384",
        [(16, [0], 14.0), (32, [1, 2], 21.5)],
        dataset={"path": str(dataset), "sha256": "0" * 64, "manifest": {}},
    )
    figures = capacity_figures(run=run)
    curve = figures[0]
    names = [trace.name for trace in curve.data]
    assert "Measured occupancy" in names
    measured = next(t for t in curve.data if t.name == "Measured occupancy")
    assert list(measured.y) == [14.0, 21.5]
    assert any("MTP3" in n for n in names)


def test_serve_facts_accept_underscored_keys_and_json_strings() -> None:
    from harness.capacity.measured import serve_facts

    facts = serve_facts(
        {
            "model": "zai-org/GLM-5.3",
            "serve": {
                "tensor_parallel_size": 4,
                "data-parallel-size": 2,
                "enable_expert_parallel": True,
                "kv-cache-dtype": "auto",
                "max-num-seqs": 128,
                "attention-config": '{"hisparse_config": {"device_buffer_size": 8192}}',
                "kv-transfer-config": {
                    "kv_connector": "MultiConnector",
                    "kv_connector_extra_config": {
                        "connectors": [
                            {
                                "kv_connector": "HiSparseConnector",
                                "kv_connector_extra_config": {"host_pool_gib": 200},
                            }
                        ]
                    },
                },
            },
        }
    )
    assert (facts.tp, facts.dp, facts.ep, facts.kv_dtype) == (4, 2, True, "bf16")
    assert facts.hisparse and facts.host_pool_gib == 200.0 and facts.device_buffer_size == 8192


def _builder_manifest(conversations: int, extra: int) -> dict[str, Any]:
    # the shape harness.dataset.builder writes: per conversation, per turn templated lengths
    return {
        "conversations": [
            {
                "index": k,
                "turns": [
                    {"turn": t, "templated_prompt_tokens": _prompt_tokens(k, t) + extra}
                    for t in range(1, TURNS + 1)
                ],
            }
            for k in range(conversations)
        ]
    }


def test_workload_from_builder_manifest_embedded_and_sidecar(tmp_path: Path) -> None:
    dataset = _write_dataset(tmp_path / "built.json", 4)
    embedded = _write_run(
        tmp_path / "run-embedded",
        "hisparse384",
        [(2, [1, 2], 2.0)],
        dataset={"path": str(dataset), "sha256": "0" * 64, "manifest": _builder_manifest(4, 10)},
    )
    comparison = compare_run(embedded)
    assert comparison.workload.source == "templated_prompt_tokens in the dataset manifest"
    # conversations 1 and 2: 79,998 + 1,500 + 10 (template tokens) = 81,508 mean context
    assert comparison.points[0].mean_context == 81508
    sidecar = dataset.with_name(dataset.name + ".manifest.json")
    sidecar.write_text(json.dumps(_builder_manifest(4, 20)), encoding="utf-8")
    beside = _write_run(
        tmp_path / "run-sidecar",
        "hisparse384",
        [(2, [1, 2], 2.0)],
        dataset={"path": str(dataset), "sha256": "0" * 64, "manifest": {}},
    )
    comparison = compare_run(beside)
    assert comparison.workload.source == f"templated_prompt_tokens in {sidecar}"
    assert comparison.points[0].mean_context == 81518


def test_workload_from_the_recipe_file(tmp_path: Path) -> None:
    # nothing but the recipe name: datasets/openhands-glm53.yaml supplies F, S and N
    run = _write_run(
        tmp_path / "run-recipe",
        "hisparse384",
        [(32, list(range(32)), 21.0)],
        dataset={"spec": "openhands-glm53", "path": "", "sha256": "0" * 64, "manifest": {}},
    )
    workload = compare_run(run).workload
    assert workload.source.startswith("recipe")
    assert (workload.turn_contexts[0], workload.max_context) == (74160, 85836)
