"""An offline generator of OpenHands-like trajectories and of reasoning-style pad text.

Written for this project (not derived from any dataset): a task statement about a made-up
repository, then tool observations of the kinds an agent sees (directory listings, source files,
grep hits, diffs, pytest logs, tracebacks, short acknowledgements). Deterministic from the seed:
row i depends only on (seed, i). Lengths follow log-normal laws: first user messages of hundreds
to thousands of tokens, observations from a few tokens to several thousand.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

GENERATOR_VERSION = "repro-synthetic/1"

_SYLLABLES = (
    "ar",
    "ben",
    "cor",
    "dal",
    "el",
    "fen",
    "gra",
    "hol",
    "in",
    "jas",
    "kel",
    "lum",
    "mor",
    "nex",
    "or",
    "pol",
    "quin",
    "ras",
    "sel",
    "tor",
    "ul",
    "ven",
    "wis",
    "xan",
    "yor",
    "zed",
)
_NOUNS = (
    "cache",
    "parser",
    "config",
    "session",
    "buffer",
    "token",
    "record",
    "schema",
    "index",
    "handler",
    "client",
    "request",
    "frame",
    "column",
    "encoder",
    "window",
    "graph",
    "node",
    "registry",
    "plugin",
    "stream",
    "batch",
    "result",
    "field",
    "matrix",
    "engine",
    "loader",
)
_VERBS = (
    "load",
    "parse",
    "build",
    "merge",
    "resolve",
    "render",
    "update",
    "flush",
    "validate",
    "convert",
    "compute",
    "collect",
    "dispatch",
    "normalize",
    "serialize",
    "fetch",
    "apply",
)
_ERRORS = (
    "TypeError",
    "ValueError",
    "KeyError",
    "AttributeError",
    "IndexError",
    "AssertionError",
    "RuntimeError",
    "ZeroDivisionError",
    "UnicodeDecodeError",
    "NotImplementedError",
)
_SCIENCE_TERMS = (
    "enthalpy",
    "entropy",
    "momentum",
    "eigenvalue",
    "photon",
    "catalyst",
    "enzyme",
    "molarity",
    "wavelength",
    "torque",
    "resistance",
    "capacitance",
    "isotope",
    "equilibrium",
    "gradient",
    "integral",
    "derivative",
    "probability",
    "variance",
    "orbital",
    "lattice",
    "viscosity",
    "frequency",
    "amplitude",
    "pressure",
    "oxidation",
    "genotype",
    "allele",
    "mitochondria",
)
_REASONING = (
    "Okay, let me think about this carefully.",
    "First, I need to recall how the {t} relates to the {u}.",
    "The {t} should be proportional to the {u}, so doubling one doubles the other.",
    "Wait, that does not look right; let me recheck the units of the {t}.",
    "If the {t} is {a} and the {u} is {b}, then the ratio is about {c}.",
    "Hmm, option {o} mentions the {t}, but it ignores the {u} entirely.",
    "So the answer cannot be {o}, because the {u} would have to be negative.",
    "Let me compute it step by step: {a} times {b} gives {d}.",
    "Actually, the standard approach uses the {t} directly, which simplifies things.",
    "That matches the known result for the {u}, so I am fairly confident.",
    "Another way to see it: the {t} is conserved, hence the {u} cannot change sign.",
    "Let me double-check with a limiting case where the {t} goes to zero.",
)


def _name(rng: random.Random, parts: int = 2) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts))


def _ident(rng: random.Random) -> str:
    return f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"


def _lognormal_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(median * math.exp(rng.gauss(0.0, sigma)))))


def _python_function(rng: random.Random, module: str) -> list[str]:
    name = _ident(rng)
    args = ", ".join(rng.sample(_NOUNS, rng.randint(1, 3)))
    lines = [
        f"def {name}({args}):",
        f'    """{name.replace("_", " ").capitalize()} for {module}."""',
    ]
    for _ in range(rng.randint(2, 9)):
        kind = rng.random()
        var = rng.choice(_NOUNS)
        if kind < 0.3:
            lines.append(f"    {var} = {_ident(rng)}({rng.choice(_NOUNS)}, {rng.randint(0, 64)})")
        elif kind < 0.55:
            lines.append(f"    if {var} is None:")
            lines.append(f"        raise {rng.choice(_ERRORS)}('{var} must be set')")
        elif kind < 0.75:
            lines.append(f"    for item in {var}.items():")
            lines.append(f"        {rng.choice(_NOUNS)}.append(item)")
        else:
            lines.append(f"    # {rng.choice(_VERBS)} the {rng.choice(_NOUNS)} before returning")
    lines.append(f"    return {rng.choice(_NOUNS)}")
    return lines


class _Repo:
    def __init__(self, rng: random.Random):
        self.name = _name(rng, 2)
        self.owner = _name(rng, 2)
        self.package = self.name.replace("-", "_")
        self.modules = [f"{rng.choice(_NOUNS)}s" for _ in range(rng.randint(4, 9))]
        self.modules = list(dict.fromkeys(self.modules))
        self.path = f"/workspace/{self.owner}__{self.name}"

    def file(self, rng: random.Random) -> str:
        return f"{self.package}/{rng.choice(self.modules)}.py"


def _task(rng: random.Random, repo: _Repo) -> str:
    module = repo.file(rng)
    func = _ident(rng)
    error = rng.choice(_ERRORS)
    para = []
    for _ in range(_lognormal_int(rng, 10, 1.0, 2, 150)):
        para.append(
            f"When calling `{_ident(rng)}` with a {rng.choice(_NOUNS)} that has "
            f"{rng.randint(2, 900)} entries, the {rng.choice(_NOUNS)} is {rng.choice(_VERBS)}d "
            f"twice and the {rng.choice(_NOUNS)} ends up stale."
        )
    code = "\n".join(_python_function(rng, module))
    snippet = "\n".join(
        f">>> {_ident(rng)}({rng.choice(_NOUNS)}={rng.randint(0, 99)})"
        for _ in range(rng.randint(1, 6))
    )
    return (
        f"<uploaded_files>\n{repo.path}\n</uploaded_files>\n"
        f"I've uploaded a python code repository in the directory {repo.path}. Consider the "
        f"following issue description:\n\n<issue_description>\n"
        f"`{func}` raises {error} for empty {rng.choice(_NOUNS)}s\n\n" + " ".join(para) + "\n\n"
        f"Minimal example:\n```python\n{code}\n```\n\n{snippet}\n"
        "Traceback (most recent call last):\n"
        f'  File "{repo.path}/{module}", line {rng.randint(10, 900)}, in {func}\n'
        f"{error}: unexpected {rng.choice(_NOUNS)}\n</issue_description>\n\n"
        "Can you help me implement the necessary changes to the repository so that the "
        "requirements specified in the <issue_description> are met? I've already taken care of "
        "all changes to any of the test files described in the <issue_description>. Your task is "
        "to make the minimal changes to non-test files in the repository.\n"
        "Follow these phases: 1. READING 2. RUNNING 3. EXPLORATION 4. TEST CREATION "
        "5. FIX ANALYSIS 6. FIX IMPLEMENTATION 7. VERIFICATION 8. FINAL REVIEW."
    )


def _listing(rng: random.Random, repo: _Repo, size: int) -> str:
    lines = [f"{repo.path}/"]
    for _ in range(size):
        sub = rng.choice(repo.modules + ["tests", "docs", "scripts"])
        lines.append(f"{repo.path}/{repo.package}/{sub}/{_ident(rng)}.py")
    return "\n".join(lines)


def _source(rng: random.Random, repo: _Repo, size: int) -> str:
    module = repo.file(rng)
    lines = [f"Here's the result of running `cat -n` on {repo.path}/{module}:"]
    body: list[str] = ["import os", f"from {repo.package} import {rng.choice(repo.modules)}", ""]
    while len(body) < size:
        body.extend(_python_function(rng, module) + [""])
    lines.extend(f"{n:6d}\t{line}" for n, line in enumerate(body[:size], 1))
    return "\n".join(lines)


def _grep(rng: random.Random, repo: _Repo, size: int) -> str:
    word = _ident(rng)
    return "\n".join(
        f"./{repo.file(rng)}:{rng.randint(1, 2000)}:    {rng.choice(_NOUNS)} = {word}"
        f"({rng.choice(_NOUNS)})"
        for _ in range(size)
    )


def _diff(rng: random.Random, repo: _Repo, size: int) -> str:
    module = repo.file(rng)
    lines = [f"diff --git a/{module} b/{module}", f"--- a/{module}", f"+++ b/{module}"]
    while len(lines) < size:
        start = rng.randint(1, 800)
        lines.append(f"@@ -{start},7 +{start},8 @@ def {_ident(rng)}(self):")
        for line in _python_function(rng, module)[:6]:
            lines.append(rng.choice((" ", " ", "-", "+")) + line)
    return "\n".join(lines)


def _pytest(rng: random.Random, repo: _Repo, size: int) -> str:
    lines = [
        "============================= test session starts ==============================",
        (
            f"platform linux -- Python 3.{rng.randint(8, 12)}.{rng.randint(0, 9)}, "
            f"pytest-7.{rng.randint(0, 4)}.0"
        ),
        f"rootdir: {repo.path}",
        f"collected {size} items",
        "",
    ]
    failed = []
    for _ in range(size):
        test = f"tests/test_{rng.choice(repo.modules)}.py::test_{_ident(rng)}"
        ok = rng.random() > 0.15
        lines.append(f"{test} {'PASSED' if ok else 'FAILED'}")
        if not ok:
            failed.append(test)
    for test in failed:
        lines.append(f"_______ {test.split('::')[1]} _______")
        lines.append(_traceback(rng, repo, rng.randint(2, 6)))
    lines.append(
        f"===== {len(failed)} failed, {size - len(failed)} passed in "
        f"{rng.uniform(0.1, 90):.2f}s ====="
    )
    return "\n".join(lines)


def _traceback(rng: random.Random, repo: _Repo, depth: int) -> str:
    lines = ["Traceback (most recent call last):"]
    for _ in range(depth):
        lines.append(
            f'  File "{repo.path}/{repo.file(rng)}", line {rng.randint(1, 1500)}, in {_ident(rng)}'
        )
        lines.append(f"    {rng.choice(_NOUNS)} = {_ident(rng)}({rng.choice(_NOUNS)})")
    lines.append(f"{rng.choice(_ERRORS)}: {rng.choice(_NOUNS)} {rng.randint(0, 4096)} is not valid")
    return "\n".join(lines)


_SHORT = (
    "File created successfully at: {path}/reproduce_issue.py",
    "The file {path}/{file} has been edited successfully.",
    "[Command finished with exit code 0]",
    "[Command finished with exit code 1]",
    "ok",
)


def _observation(rng: random.Random, repo: _Repo) -> str:
    kind = rng.random()
    size = _lognormal_int(rng, 25, 1.0, 1, 600)
    if kind < 0.15:
        return rng.choice(_SHORT).format(path=repo.path, file=repo.file(rng))
    if kind < 0.3:
        return _listing(rng, repo, size)
    if kind < 0.5:
        return _source(rng, repo, size)
    if kind < 0.62:
        return _grep(rng, repo, max(1, size // 2))
    if kind < 0.75:
        return _diff(rng, repo, size)
    if kind < 0.9:
        return _pytest(rng, repo, max(1, size // 2))
    return _traceback(rng, repo, max(1, size // 8))


def trajectory(seed: int, index: int) -> dict[str, Any]:
    """Row `index` in the raw nebius row shape (trajectory list of role/content messages)."""
    rng = random.Random(f"{GENERATOR_VERSION}:{seed}:{index}")
    repo = _Repo(rng)
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are OpenHands agent, a helpful AI assistant.",
            "name": None,
            "tool_call_id": None,
            "tool_calls": None,
        },
        {
            "role": "user",
            "content": _task(rng, repo),
            "name": None,
            "tool_call_id": None,
            "tool_calls": None,
        },
    ]
    for step in range(_lognormal_int(rng, 30, 0.5, 4, 120)):
        call_id = f"call_{index}_{step}"
        messages.append(
            {
                "role": "assistant",
                "content": f"Let me {rng.choice(_VERBS)} the {rng.choice(_NOUNS)}.",
                "name": None,
                "tool_call_id": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "execute_bash", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "content": _observation(rng, repo),
                "name": "execute_bash",
                "tool_call_id": call_id,
                "tool_calls": None,
            }
        )
    return {
        "trajectory_id": f"synthetic-{seed}-{index}",
        "instance_id": f"{repo.owner}__{repo.name}-{rng.randint(100, 9999)}",
        "repo": f"{repo.owner}/{repo.name}",
        "trajectory": messages,
        "resolved": 1 if rng.random() < 0.5 else 0,
        "exit_status": "submit",
    }


def trajectories(seed: int) -> Iterator[dict[str, Any]]:
    index = 0
    while True:
        yield trajectory(seed, index)
        index += 1


def pad_document(seed: int, index: int) -> dict[str, Any]:
    """One reasoning-trace-like text (with <think> markup, as R1 traces have), field `output`."""
    rng = random.Random(f"{GENERATOR_VERSION}:pad:{seed}:{index}")
    sentences = []
    for _ in range(_lognormal_int(rng, 120, 0.6, 10, 900)):
        sentences.append(
            rng.choice(_REASONING).format(
                t=rng.choice(_SCIENCE_TERMS),
                u=rng.choice(_SCIENCE_TERMS),
                o="ABCD"[rng.randint(0, 3)],
                a=rng.randint(2, 500),
                b=round(rng.uniform(0.1, 50), 2),
                c=round(rng.uniform(0.01, 9), 3),
                d=rng.randint(10, 25000),
            )
        )
    paragraphs = [" ".join(sentences[i : i + 6]) for i in range(0, len(sentences), 6)]
    answer = f"The answer is {'ABCD'[rng.randint(0, 3)]}."
    return {"output": "<think>\n" + "\n\n".join(paragraphs) + "\n</think>\n\n" + answer}


def pad_documents(seed: int) -> Iterator[dict[str, Any]]:
    index = 0
    while True:
        yield pad_document(seed, index)
        index += 1
