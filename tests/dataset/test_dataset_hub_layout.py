"""The hub path of datasets/openhands-glm53.yaml, offline, through the real loading code.

A hub cache is built in the hub's own layout (`datasets--nebius--…` / `datasets--nvidia--…` /
`models--zai-org--GLM-5.3`, blobs + snapshot symlinks + refs/main) at the recipe's pinned
revisions, with small local data; then `repro dataset build openhands-glm53` runs in a fresh
process with HF_HUB_OFFLINE=1 and HF_HUB_CACHE pointing at it, so huggingface_hub and datasets
resolve and read it exactly as on a node with a pre-populated cache. Only the sizes are
overridden (4 conversations x 4 turns), never the sources or revisions.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from harness.dataset import synthetic
from harness.serve.tiny import resolve_tokenizer

RECIPE = yaml.safe_load(Path("datasets/openhands-glm53.yaml").read_text())
TRAJ, TRAJ_REV = RECIPE["trajectories"], RECIPE["trajectories_revision"]
PAD, PAD_REV = RECIPE["pad_text"], RECIPE["pad_revision"]
TOKENIZER = RECIPE["tokenizer"]
TOKENIZER_REV = "a" * 40  # the recipe pins no tokenizer revision: refs/main names this one
SIZES = ["--number", "4", "--num-turns", "4", "--first-turn-length", "512",
         "--subsequent-turn-length", "48"]  # fmt: skip


def _parquet(rows: list[dict]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def add_repo(cache: Path, kind: str, repo: str, revision: str, files: dict[str, bytes]) -> Path:
    """One repo in huggingface_hub's cache layout; returns its snapshot folder."""
    root = cache / f"{kind}--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / revision
    for rel, content in files.items():
        blob = root / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return snapshot


def trajectory_rows(count: int) -> list[dict]:
    rows = []
    for index in range(count):
        row = synthetic.trajectory(7, index)
        messages = [{"role": m["role"], "content": m["content"]} for m in row["trajectory"]]
        rows.append({"instance_id": f"repo__{index}", "trajectory": messages, "resolved": 1})
    return rows


def pad_rows(count: int, field: str = "output") -> list[dict]:
    return [
        {"input": f"question {i}", field: synthetic.pad_document(7, i)["output"]}
        for i in range(count)
    ]


@pytest.fixture
def hub(tmp_path: Path) -> Path:
    cache = tmp_path / "hub"
    add_repo(cache, "datasets", TRAJ, TRAJ_REV,
             {"data/train-00000-of-00001.parquet": _parquet(trajectory_rows(12))})  # fmt: skip
    add_repo(cache, "datasets", PAD, PAD_REV,
             {"data/train-00000-of-00001.parquet": _parquet(pad_rows(300))})  # fmt: skip
    tok = resolve_tokenizer("tiny:tokenizer")
    files = {p.name: p.read_bytes() for p in tok.iterdir() if p.is_file() and p.name[0] != "."}
    add_repo(cache, "models", TOKENIZER, TOKENIZER_REV, files)
    return cache


def build(tmp_path: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.getcwd(),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
        "HF_HOME": str(tmp_path / "hf-home"),  # an empty datasets cache: no prepared copies
        "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets"),
        # each test plants its own hub cache under the same pinned revisions: a pad pool cached by
        # another test (keyed by revision, immutable on a real hub) would hide the loading path
        "REPRO_CACHE": str(tmp_path / "repro-cache"),
    }
    out = tmp_path / "glm53.json"
    argv = [sys.executable, "-c", "from harness.cli import main; main()", "dataset", "build",
            "openhands-glm53", *SIZES, "--output-path", str(out), *extra]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_hub_layout_build_offline_at_the_pinned_revisions(tmp_path: Path, hub: Path) -> None:
    proc = build(tmp_path, hub)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "glm53.json").read_text())
    assert len(data["conversations"]) == 4 and data["metadata"]["dataset_name"] == TRAJ
    manifest = json.loads((tmp_path / "glm53.json.manifest.json").read_text())
    sources = manifest["sources"]
    assert sources["trajectories"]["revision"] == TRAJ_REV
    assert sources["trajectories"]["served_by"] == "datasets"
    assert sources["pad"]["revision"] == PAD_REV and sources["pad"]["served_by"] == "datasets"
    tokenizer = manifest["tokenizer"]  # resolved by huggingface_hub through refs/main
    assert tokenizer["kind"] == "hub" and tokenizer["path"].endswith(f"snapshots/{TOKENIZER_REV}")
    # the rows came from the cached parquet, in order: row 0's task text opens conversation 0
    first = trajectory_rows(1)[0]["trajectory"]
    first_user = next(m["content"] for m in first if m["role"] == "user")
    line = next(x for x in first_user.splitlines() if len(x) > 20)
    assert line in json.dumps(data["conversations"][0], ensure_ascii=False).replace("\\n", "\n")


def test_revision_mismatch_names_the_recipe_key(tmp_path: Path, hub: Path) -> None:
    snapshots = hub / f"datasets--{TRAJ.replace('/', '--')}" / "snapshots"
    (snapshots / TRAJ_REV).rename(snapshots / ("b" * 40))  # the cache holds another revision
    proc = build(tmp_path, hub)
    assert proc.returncode != 0
    err = proc.stderr
    assert "trajectories_revision" in err and TRAJ_REV in err and "b" * 40 in err, err
    assert "HF_HUB_OFFLINE=1" in err


def test_missing_column_names_the_recipe_key(tmp_path: Path, hub: Path) -> None:
    snapshot = hub / f"datasets--{PAD.replace('/', '--')}" / "snapshots" / PAD_REV
    target = snapshot / "data" / "train-00000-of-00001.parquet"
    target.unlink()
    target.write_bytes(_parquet(pad_rows(50, field="response")))
    proc = build(tmp_path, hub)
    assert proc.returncode != 0
    assert "pad_text_field" in proc.stderr and "'output'" in proc.stderr, proc.stderr
    assert "response" in proc.stderr  # the columns the rows do have
