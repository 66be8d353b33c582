"""How long `repro report` takes on a GPU-sized run, and how big the HTML gets.

A synthetic run shaped like the blog's: 5 points, a 30 s scrape over 3 hours (360 scrapes per
point), ~200 /metrics series per scrape (histogram buckets etc.), two engines. Also times
`repro compare` and the PNG export (needs Chromium).

Run: /work/scratch/hv/bin/python benchmarks/bench_report.py
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_figures_crafted import published_points, write_run

from harness.analysis.compare import compare_runs
from harness.report.dashboard import write_report
from harness.report.figures import pareto_figure
from harness.results import RunLayout, load_run, point_id

SCRAPES, SERIES = 360, 200


def big_samples(path: Path, start: float, parallel: int) -> int:
    lines = ["timestamp,monotonic,name,labels,value"]
    for i in range(SCRAPES):
        ts = start + 30 * i
        for engine in ("0", "1"):
            lab = json.dumps({"engine": engine}).replace('"', '""')
            for name, value in (
                ("vllm:num_requests_running", parallel / 2),
                ("vllm:num_requests_waiting", 1),
                ("vllm:kv_cache_usage_perc", 0.9),
                ("vllm:num_preemptions_total", i // 50),
                ("vllm:spec_decode_num_drafts_total", 30 * i),
                ("vllm:spec_decode_num_accepted_tokens_total", 20 * i),
            ):
                lines.append(f'{ts},{ts},{name},"{lab}",{value}')
            for k in range(SERIES // 2 - 6):
                bucket = json.dumps({"engine": engine, "le": str(k)}).replace('"', '""')
                lines.append(f'{ts},{ts},vllm:e2e_request_latency_seconds_bucket,"{bucket}",{i}')
    path.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        a = write_run(root / "a", "hisparse", published_points(0))
        b = write_run(root / "b", "offload", published_points(1))
        rows = 0
        for run_dir in (a, b):
            run = load_run(run_dir)
            for p in run.points:
                rows += big_samples(
                    RunLayout(run_dir).samples_csv(point_id(p.parallel, p.number)),
                    p.window[0],
                    p.parallel,
                )
        print(f"synthetic samples: {rows:,} rows in 10 points")
        start = time.perf_counter()
        out = write_report([a, b], out=root / "report.html")
        took = time.perf_counter() - start
        print(
            f"write_report(2 runs x 5 points): {took:.2f} s, "
            f"HTML {out.stat().st_size / 2**20:.1f} MiB"
        )
        start = time.perf_counter()
        compare_runs(load_run(a), load_run(b))
        print(f"compare_runs: {1000 * (time.perf_counter() - start):.0f} ms")
        if shutil.which("chromium"):
            from harness.report.images import export_figure

            fig = pareto_figure([load_run(a), load_run(b)])
            start = time.perf_counter()
            export_figure(fig, root / "fig.png")
            print(f"PNG export (kaleido + system Chromium): {time.perf_counter() - start:.2f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
