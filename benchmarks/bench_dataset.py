"""Benchmark: build the full blog-shaped dataset (128 x 13 turns, 10,649,088 bare tokens) offline.

Local byte-level BPE tokenizer (the tiny tokenizer unless --tokenizer), local trajectories (a
JSONL of synthetic OpenHands-like rows) and local pad text of several kinds (--pad-kinds):

- `synthetic`: the project's own generated reasoning traces (few distinct words);
- `code`: real Python source, this interpreter's standard library minus the files the tiny
  tokenizer was trained on (then installed packages if more is needed), in rows of 8-40 K
  characters with `<think>` markup and control spellings sprinkled in;
- `prose`: real English, the docstrings of those files and the `.txt` files shipped with Python.

Source generation is setup, not timed (cached in --work). Every build runs in its own process
(REPRO_CACHE pointed at --work/cache) so its peak RSS (ru_maxrss) is its own. For each
openscience pad kind: a cold build (pad-pool cache emptied first) and a warm build (the pool
cache from the cold build), then one `random` build. Prints wall time, peak RSS, the builder's
phase timings, the pool's encoding and cache status, the exactness verdict and the load
average; --verify re-tokenizes each output in full (not timed). --compare-with DIR also builds
with the harness package found in DIR (e.g. `git archive` of an older commit) and checks the
outputs are byte-identical.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_dataset.py \
        [--pad-kinds synthetic code prose] [--no-random] [--repeat N] [--verify]
        [--compare-with DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
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
PAD_KINDS = ("synthetic", "code", "prose")
TARGETS = {"cold_s": 15.0, "warm_s": 5.0, "peak_mib": 620.0}
_MARKUP = ("<think>", "</think>", "< Think >", "</THINK >", "<|im_end|>", "<｜end▁of▁sentence｜>")
_DOCSTRING = re.compile(r'"""(.{200,}?)"""', re.DOTALL)


def _python_files() -> list[Path]:
    """Held-out real source: the stdlib after the tiny tokenizer's training files, then the
    installed packages, each in sorted order."""
    from harness.dataset.tiny.tokenizer import training_files

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    trained = set(training_files())
    own = sorted(
        (p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and p not in trained),
        key=lambda p: p.relative_to(stdlib).as_posix(),
    )
    site = Path(sysconfig.get_paths()["purelib"])
    return own + sorted(site.rglob("*.py"))


def _rows_from(texts, rng: random.Random, markup: bool):
    """Rows of 8-40 K characters cut at line ends, optionally with R1-style markup."""
    buffer = ""
    for text in texts:
        buffer += text
        while len(buffer) >= 40_000:
            size = rng.randint(8_000, 40_000)
            cut = buffer.rfind("\n", 0, size) + 1 or size
            row, buffer = buffer[:cut], buffer[cut:]
            if markup:
                split = rng.randint(0, len(row))
                row = f"<think>\n{row[:split]}\n</think>\n\n{row[split:]}"
                for _ in range(rng.randint(0, 3)):
                    at = row.find("\n", rng.randint(0, len(row))) + 1
                    row = row[:at] + rng.choice(_MARKUP) + row[at:]
            yield row


def _code_texts():
    for path in _python_files():
        yield path.read_text(encoding="utf-8", errors="replace")


def _prose_texts():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.txt")):
        if "site-packages" not in path.parts:
            yield path.read_text(encoding="utf-8", errors="replace") + "\n"
    for path in _python_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _DOCSTRING.finditer(text):
            yield " ".join(line.strip() for line in match.group(1).splitlines()) + "\n\n"


def _write_pad(path: Path, kind: str, tokenizer: str) -> None:
    from harness.dataset import synthetic
    from harness.dataset.tok import TokenizerHandle

    tok = TokenizerHandle(tokenizer)
    rng = random.Random(42)
    if kind == "synthetic":
        rows = (synthetic.pad_document(42, i)["output"] for i in range(10**9))
    elif kind == "code":
        rows = _rows_from(_code_texts(), rng, markup=True)
    else:
        rows = _rows_from(_prose_texts(), rng, markup=False)
    total = 0
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as handle:
        batch: list[str] = []
        for row in rows:
            batch.append(row)
            if len(batch) == 256:
                total += sum(tok.count(batch))
                handle.writelines(json.dumps({"output": r}) + "\n" for r in batch)
                batch = []
                if total >= PAD_DOCS_TOKENS:
                    break
        total += sum(tok.count(batch))
        handle.writelines(json.dumps({"output": r}) + "\n" for r in batch)
    if total < PAD_DOCS_TOKENS:
        sys.exit(f"only {total:,} tokens of {kind} text found for the pad source")
    tmp.rename(path)


def _sources(work: Path, tokenizer: str, kinds: list[str]) -> tuple[Path, dict[str, Path]]:
    """Local trajectory and pad JSONL files (generated once, reused across runs)."""
    from harness.dataset import synthetic

    trajectories = work / "trajectories.jsonl"
    if not trajectories.exists():
        with trajectories.open("w") as handle:
            for index in range(160):
                handle.write(json.dumps(synthetic.trajectory(42, index)) + "\n")
    pads = {}
    for kind in kinds:
        pads[kind] = work / ("pad.jsonl" if kind == "synthetic" else f"pad-{kind}.jsonl")
        if not pads[kind].exists():
            _write_pad(pads[kind], kind, tokenizer)
    return trajectories, pads


def _child(args: argparse.Namespace) -> None:
    from harness.dataset.builder import build_dataset
    from harness.dataset.recipe import make_recipe
    from harness.dataset.tok import TokenizerHandle

    tok = TokenizerHandle(args.tokenizer)  # loading is not part of the build proper
    fields = {"tokenizer": args.tokenizer, "trajectories": args.trajectories}
    fields.update(pad_source=args.pad_source, pad_text=args.pad_text)
    recipe = make_recipe({**BLOG, **fields})
    started = time.perf_counter()
    result = build_dataset(recipe, Path(args.output), tokenizer=tok)
    wall = time.perf_counter() - started
    keys = ("exactness", "timings_s", "cpu_s", "totals", "pad", "pad_cache")
    summary = {k: result.manifest.get(k) for k in keys}
    print(json.dumps({"wall_s": wall, "sha256": result.sha256, "manifest": summary}))


def _run_build(args, work: Path, pad_source: str, pad: Path, output: Path, tree: Path | None):
    command = [sys.executable, __file__, "--child", "--tokenizer", args.tokenizer]
    command += ["--pad-source", pad_source, "--trajectories", str(args.trajectories_file)]
    command += ["--pad-text", str(pad), "--output", str(output)]
    env = {**os.environ, "REPRO_CACHE": str(work / "cache")}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    load = os.getloadavg()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    stdout = process.stdout.read() if process.stdout else ""
    _pid, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        sys.exit(f"build ({pad_source}, {pad.name}) failed with status {status}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["peak_mib"] = usage.ru_maxrss / 1024
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    result["load"] = load
    return result


def _report(label: str, result: dict, target_s: float | None) -> None:
    manifest = result["manifest"]
    exact = manifest["exactness"]
    verdicts = []
    if target_s is not None:
        verdicts.append(
            f"<= {target_s:.0f} s {'met' if result['wall_s'] <= target_s else 'NOT met'}"
        )
        peak_ok = result["peak_mib"] <= TARGETS["peak_mib"]
        verdicts.append(f"peak <= {TARGETS['peak_mib']:.0f} MiB {'met' if peak_ok else 'NOT met'}")
    exact_ok = exact["exact_turns"] == exact["turns"]
    verdicts.append("exact on every turn" if exact_ok else "NOT exact")
    print(
        f"{label:<24} wall {result['wall_s']:6.2f} s  CPU {result['cpu_s']:6.2f} s (process)  "
        f"peak RSS {result['peak_mib']:6.1f} MiB  exact turns {exact['exact_turns']}/"
        f"{exact['turns']} (drifting before repair {exact['drifting_before_repair']})  "
        f"load avg at start {result['load'][0]:.2f}  [{'; '.join(verdicts)}]"
    )
    print(f"    phases, wall (s): {manifest['timings_s']}")
    print(f"    phases, CPU (s):  {manifest['cpu_s']}")
    pad, cache = manifest["pad"], manifest.get("pad_cache") or {}
    if pad.get("encoding"):
        print(
            f"    pad pool: {pad['pool_tokens']:,} tokens from {pad['documents']} documents, "
            f"encoded by {pad['encoding']}; cache {cache.get('status', 'n/a')}"
            + (f" (key {cache['key'][:16]})" if cache.get("key") else "")
        )
    print(f"    output sha256 {result['sha256'][:16]}")


def _verify(path: Path, tokenizer: str) -> None:
    """Independent full re-tokenization of every message (and every first turn's template)."""
    from harness.dataset.tok import TokenizerHandle
    from harness.dataset.verify import verify_file

    started = time.perf_counter()
    report = verify_file(path, TokenizerHandle(tokenizer), full_template=True)
    check = report["template_full_check"]
    print(
        f"    verify {path.name} (full, not timed, {time.perf_counter() - started:.1f} s): exact "
        f"turns {report['exact_turns']}/{report['turns']}, max |drift| {report['max_abs_drift']}"
        f", turn-1 prompt_tokens match {report['prompt_tokens_turn1_match']}/"
        f"{report['conversations']}, full-render disagreements {len(check['disagreements'])}"
    )


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="tiny:tokenizer")
    parser.add_argument("--pad-kinds", nargs="+", choices=PAD_KINDS, default=list(PAD_KINDS))
    parser.add_argument("--no-random", action="store_true", help="skip the random-pad build")
    parser.add_argument("--work", type=Path, default=None, help="where sources and outputs go")
    parser.add_argument("--verify", action="store_true", help="re-tokenize outputs in full")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each build (shared CPUs)")
    parser.add_argument("--compare-with", type=Path, help="a tree with an older harness package")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pad-source", help=argparse.SUPPRESS)
    parser.add_argument("--trajectories", help=argparse.SUPPRESS)
    parser.add_argument("--pad-text", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = _parse()
    if args.child:
        _child(args)
        return
    from harness.dataset.tok import resolve_tokenizer_dir
    from harness.paths import cache_dir

    work = args.work or cache_dir() / "bench-dataset"
    work.mkdir(parents=True, exist_ok=True)
    print(f"preparing local sources in {work} (not timed) ...", flush=True)
    # Builds get a private REPRO_CACHE, so they take the tokenizer as a resolved directory.
    args.tokenizer = str(resolve_tokenizer_dir(args.tokenizer)[0])
    args.trajectories_file, pads = _sources(work, args.tokenizer, args.pad_kinds)
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()}")
    outputs: list[Path] = []
    builds = [("openscience", kind) for kind in args.pad_kinds]
    builds += [] if args.no_random else [("random", args.pad_kinds[0])]
    for pad_source, kind in builds:
        output = work / f"blog-{pad_source}-{kind}.json"
        outputs.append(output)
        runs = ["cold", "warm"] if pad_source == "openscience" else ["build"]
        runs = [run for run in runs for _ in range(args.repeat)]
        for run in runs:
            if run == "cold":
                shutil.rmtree(work / "cache" / "padpool", ignore_errors=True)
            result = _run_build(args, work, pad_source, pads[kind], output, None)
            label = f"{pad_source}/{kind} {run}" if pad_source == "openscience" else pad_source
            _report(label, result, TARGETS.get(f"{run}_s"))
        if args.compare_with:
            other = work / f"blog-{pad_source}-{kind}.baseline.json"
            base = _run_build(args, work, pad_source, pads[kind], other, args.compare_with)
            same = base["sha256"] == result["sha256"]
            print(
                f"    baseline ({args.compare_with}): wall {base['wall_s']:.2f} s, CPU "
                f"{base['cpu_s']:.2f} s (process), pad phase "
                f"{base['manifest']['timings_s']['pad']} s wall / "
                f"{base['manifest']['cpu_s']['pad']} s CPU, peak RSS "
                f"{base['peak_mib']:.1f} MiB, load avg at start {base['load'][0]:.2f}, output "
                f"{'IDENTICAL' if same else 'DIFFERENT'}"
            )
    # After all builds: a forked build child would inherit this process's peak RSS.
    for output in outputs if args.verify else []:
        _verify(output, args.tokenizer)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
