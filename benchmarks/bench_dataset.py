"""Benchmark: build the full blog-shaped dataset (128 x 13 turns, 10,649,088 bare tokens) offline.

Local byte-level BPE tokenizer (the tiny tokenizer unless --tokenizer), local trajectories (a
JSONL of synthetic OpenHands-like rows) and local pad text (a JSONL of synthetic reasoning traces,
~12 M tokens). Source generation is setup, not timed. Each build runs in its own process so its
peak RSS is its own. Prints wall time, bare tokens/s, peak RSS, the builder's phase timings, how
the pad pool was encoded, and the verdict against the target (<= 15 s wall on 2 cores). With
--verify, each output is then re-tokenized in full by `verify_file` (not timed).

    .venv/bin/python benchmarks/bench_dataset.py [--pad-source openscience random] [--verify]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BLOG = {
    "first_turn_length": 74160,
    "subsequent_turn_length": 753,
    "num_turns": 13,
    "number": 128,
    "seed": 42,
}
PAD_DOCS_TOKENS = 12_500_000
TARGET_WALL_S = 15.0


def _sources(work: Path, tokenizer: str) -> tuple[Path, Path]:
    """Local trajectory and pad JSONL files (generated once, reused across runs)."""
    from harness.dataset import synthetic
    from harness.dataset.tok import TokenizerHandle

    trajectories = work / "trajectories.jsonl"
    if not trajectories.exists():
        with trajectories.open("w") as handle:
            for index in range(160):
                handle.write(json.dumps(synthetic.trajectory(42, index)) + "\n")
    pad = work / "pad.jsonl"
    if not pad.exists():
        tok = TokenizerHandle(tokenizer)
        total, index = 0, 0
        tmp = pad.with_suffix(".tmp")
        with tmp.open("w") as handle:
            while total < PAD_DOCS_TOKENS:
                docs = [synthetic.pad_document(42, index + k) for k in range(256)]
                index += len(docs)
                total += sum(tok.count([d["output"] for d in docs]))
                handle.writelines(json.dumps(d) + "\n" for d in docs)
        tmp.rename(pad)
    return trajectories, pad


def _child(args: argparse.Namespace) -> None:
    from harness.dataset.builder import build_dataset
    from harness.dataset.recipe import make_recipe
    from harness.dataset.tok import TokenizerHandle

    tok = TokenizerHandle(args.tokenizer)  # loading is not part of the build proper
    recipe = make_recipe(
        {
            **BLOG,
            "tokenizer": args.tokenizer,
            "trajectories": args.trajectories,
            "pad_source": args.pad_source,
            "pad_text": args.pad_text,
        }
    )
    started = time.perf_counter()
    result = build_dataset(recipe, Path(args.output), tokenizer=tok)
    wall = time.perf_counter() - started
    print(
        json.dumps(
            {
                "wall_s": wall,
                "manifest": {
                    k: result.manifest[k]
                    for k in ("exactness", "timings_s", "cpu_s", "totals", "pad")
                },
            }
        )
    )


def _verify(path: Path, tokenizer: str) -> None:
    """Independent full re-tokenization of every message (and every first turn's template)."""
    from harness.dataset.tok import TokenizerHandle
    from harness.dataset.verify import verify_file

    started = time.perf_counter()
    report = verify_file(path, TokenizerHandle(tokenizer), full_template=True)
    check = report["template_full_check"]
    print(
        f"    verify (full, not timed, {time.perf_counter() - started:.1f} s): exact turns "
        f"{report['exact_turns']}/{report['turns']}, max |drift| {report['max_abs_drift']}, "
        f"turn-1 prompt_tokens match the template {report['prompt_tokens_turn1_match']}/"
        f"{report['conversations']}, full-render disagreements {len(check['disagreements'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="tiny:tokenizer")
    parser.add_argument("--pad-source", nargs="+", default=["openscience", "random"])
    parser.add_argument("--work", type=Path, default=None, help="where sources and outputs go")
    parser.add_argument(
        "--verify", action="store_true", help="re-tokenize each output in full afterwards"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trajectories", help=argparse.SUPPRESS)
    parser.add_argument("--pad-text", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.pad_source = args.pad_source[0]
        _child(args)
        return

    from harness.paths import cache_dir

    work = args.work or cache_dir() / "bench-dataset"
    work.mkdir(parents=True, exist_ok=True)
    print(f"preparing local sources in {work} (not timed) ...", flush=True)
    trajectories, pad = _sources(work, args.tokenizer)
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()}")
    for pad_source in args.pad_source:
        command = [
            sys.executable,
            __file__,
            "--child",
            "--tokenizer",
            args.tokenizer,
            "--pad-source",
            pad_source,
            "--trajectories",
            str(trajectories),
            "--pad-text",
            str(pad),
            "--output",
            str(work / f"blog-{pad_source}.json"),
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        stdout = process.stdout.read() if process.stdout else ""
        _pid, status, usage = os.wait4(process.pid, 0)
        if status != 0:
            sys.exit(f"build ({pad_source}) failed with status {status}")
        result = json.loads(stdout.strip().splitlines()[-1])
        manifest = result["manifest"]
        tokens = manifest["totals"]["bare_tokens"]
        exact = manifest["exactness"]
        cpu = usage.ru_utime + usage.ru_stime
        print(
            f"pad-source {pad_source:<11} wall {result['wall_s']:6.2f} s  "
            f"CPU {cpu:6.2f} s (whole process, incl. imports and tokenizer load)  "
            f"{tokens / result['wall_s'] / 1e6:5.2f} M bare tokens/s  "
            f"peak RSS {usage.ru_maxrss / 1024:7.1f} MiB  tokens {tokens:,}  "
            f"exact turns {exact['exact_turns']}/{exact['turns']} "
            f"(drifting before repair {exact['drifting_before_repair']})"
        )
        print(f"    phases, wall (s): {manifest['timings_s']}")
        print(f"    phases, CPU (s):  {manifest['cpu_s']}")
        pad = manifest["pad"]
        if pad.get("encoding"):
            print(
                f"    pad pool: {pad['pool_tokens']:,} tokens from {pad['documents']} documents, "
                f"encoded by {pad['encoding']}"
                + (f" ({pad['distinct_chunks']:,} distinct)" if pad.get("distinct_chunks") else "")
                + (f"; note: {pad['encoding_note']}" if pad.get("encoding_note") else "")
            )
        verdict = "met" if result["wall_s"] <= TARGET_WALL_S else "NOT met"
        print(f"    target <= {TARGET_WALL_S:.0f} s wall: {verdict}")
        print(f"    load average after: {os.getloadavg()}")
    # After all builds: a forked build child would inherit this process's peak RSS.
    for pad_source in args.pad_source if args.verify else []:
        print(f"pad-source {pad_source}:")
        _verify(work / f"blog-{pad_source}.json", args.tokenizer)


if __name__ == "__main__":
    main()
