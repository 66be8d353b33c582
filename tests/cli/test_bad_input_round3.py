"""Issue 26, third round of hostile input: one gate for every name, records that cannot lie,
servers that shed load. Each case is a one-line error (exit 2) before any work, a reader that
degrades instead of dying, or escaped output; never a traceback."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from support.cli_errors import one_error_line
from support.crafted_runs import write_run

from harness.cli import cli
from harness.cli.gate import NAME_LISTS, NAMES, is_guarded, is_text_param, walk
from harness.client.scrape import read_samples_counted
from harness.config import RECORD_BYTES, json_depth, parse_yaml, read_json, safe_load
from harness.dataset import ensure_dataset
from harness.errors import ConfigError, DatasetError
from harness.gate.regress import render_markdown
from harness.names import for_html, for_markdown, for_markdown_code, for_plotly, for_terminal
from harness.records import run_damage
from harness.report.series import run_series
from harness.report.tables import when
from harness.report.timeseries import timeseries_figures
from harness.results import load_run, point_id
from harness.serve.doctor import url_check
from harness.serve.profiles import load_profile


@pytest.fixture
def free_loopback_server() -> Iterator[str]:
    """A server on a free loopback port whose /health answers 200."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


REPRO = [sys.executable, "-c", "from harness.cli import main; main()"]


def repro(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run(
        [*REPRO, *args], capture_output=True, text=True, timeout=timeout, env=full_env, check=False
    )


def _text_params() -> list[tuple[tuple[str, ...], click.Parameter]]:
    found = []
    for path, command in walk(cli):
        for param in command.params:
            if is_text_param(param):
                found.append((path, param))
    return found


def _argv(path: tuple[str, ...], param: click.Parameter, value: str) -> list[str]:
    if isinstance(param, click.Option):
        return [*path, param.opts[0], value]
    return [*path, value]


def refusal(args: list[str]) -> str:
    """The one-line message the gate refuses ARGS with (a ConfigError, which `repro` prints as
    `error: ...` with exit 2; click's own checks, e.g. a path that must exist, exit 2 too)."""
    result = CliRunner().invoke(cli, args)
    if isinstance(result.exception, ConfigError):
        return str(result.exception)
    assert result.exit_code == 2 and "Invalid value for" in result.output, (
        result.exit_code,
        result.output,
        result.exception,
    )
    return result.output.strip().splitlines()[-1]


TEXT_PARAMS = _text_params()
IDS = [" ".join(p) + " " + (q.opts[0] if isinstance(q, click.Option) else q.name or "")
       for p, q in TEXT_PARAMS]  # fmt: skip


# ------------------------------------------------------------------ item 1: one name gate


def test_the_walk_finds_the_commands_with_path_and_name_options() -> None:
    words = {" ".join(p) for p, _ in TEXT_PARAMS}
    assert {"sweep", "simulate", "simulate parity", "report", "runs list", "regress"} <= words
    assert len(TEXT_PARAMS) > 80 and all(is_guarded(param) for _, param in TEXT_PARAMS)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every place a command could write points into an empty folder."""
    for var in ("REPRO_RESULTS", "REPRO_DASHBOARDS", "REPRO_CACHE"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("REPRO_HISTORY", str(tmp_path / "history.sqlite"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


HOSTILE_TEXT = {"esc": "a\x1b[2Jb", "nl": "x\ny", "bytes": "bad\udcffbytes"}
TEXT_CASES = [
    pytest.param(path, param, value, id=f"{kind}-{name}")
    for (path, param), name in zip(TEXT_PARAMS, IDS, strict=True)
    for kind, value in HOSTILE_TEXT.items()
    if not (param.name == "pad_text" and kind == "nl")  # --pad-text is multi-line text
]


@pytest.mark.parametrize(("path", "param", "value"), TEXT_CASES)
def test_every_text_option_refuses_control_characters_before_any_work(
    path: tuple[str, ...], param: click.Parameter, value: str, sandbox: Path
) -> None:
    message = refusal(_argv(path, param, value))
    reasons = ("control character", "not valid UTF-8", "a name is letters", "does not exist")
    assert any(reason in message for reason in reasons), message
    assert "\x1b" not in message and "\n" not in message.strip()  # the value shown escaped
    assert sorted(p.name for p in sandbox.iterdir()) == []  # nothing written, nothing created


NAME_PARAMS = [(p, q) for p, q in TEXT_PARAMS if q.name in NAMES | NAME_LISTS]


@pytest.mark.parametrize(("path", "param"), NAME_PARAMS, ids=lambda x: str(x))
@pytest.mark.parametrize(
    "value", ["../x", "/abs/path", ".hidden", "a b", "<b>x</b>", "x" * 129, "c1,../c8", "`x`"]
)
def test_every_name_option_takes_only_safe_names(
    path: tuple[str, ...], param: click.Parameter, value: str, sandbox: Path
) -> None:
    message = refusal(_argv(path, param, value))
    assert "a name is letters, digits" in message and param.opts[0] in message, message


def test_simulate_run_id_cannot_leave_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for args in (
        ["simulate", "--profile", "hisparse384", "--points", "c1", "--run-id", "../escaped"],
        ["simulate", "parity", "--fit", str(tmp_path), "--run", str(tmp_path),
         "--run-id", str(tmp_path / "abs")],
    ):  # fmt: skip
        one_error_line(repro(*args, "--out", str(out)), "'--run-id'", "a name is letters")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_error_messages_print_control_characters_escaped(tmp_path: Path) -> None:
    # a run folder whose manifest names a hostile run id: the error shows it escaped
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text('{"schema_version": "repro.run/1", "run_id": "\\u001b[2J"}')
    result = repro("runs", "show", str(run), timeout=60)
    assert result.returncode == 2 and "\x1b" not in result.stderr, result.stderr


# ------------------------------------------------------------------ item 5: checks that check


def test_doctor_url_fails_for_a_dead_url() -> None:
    result = repro("doctor", "--url", "http://127.0.0.1:1", timeout=60)  # before: all pass
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "FAIL server:" in result.stdout and "all checks pass" not in result.stdout
    assert url_check("htp:/nowhere").status == "fail"  # the check itself, called directly


@pytest.mark.parametrize("command", [["doctor"], ["sweep", "--profile", "cpu-tiny"],
                                     ["coherence", "--profile", "cpu-tiny"]])  # fmt: skip
@pytest.mark.parametrize("url", ["htp:/nowhere", "http://[::1", "http://h:x", "http://:80"])
def test_every_url_option_refuses_a_malformed_url(command: list[str], url: str) -> None:
    # before: doctor passed them all, `sweep --url http://[::1` was a ValueError traceback
    one_error_line(repro(*command, "--url", url, timeout=60), f"'--url': {url!r}", "http://HOST")


def test_doctor_url_passes_for_a_live_server(free_loopback_server: str) -> None:
    result = repro("doctor", "--url", free_loopback_server, "--json", timeout=60)
    assert '"name": "server"' in result.stdout and '"status": "ok"' in result.stdout


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--time-scale", "0", "must be more than 0"),
        ("--time-scale", "-1", "must be more than 0"),
        ("--time-scale", "1e9", "is more than 100"),
        ("--fail-rate", "1.5", "is more than 1"),
        ("--truncate-rate", "-0.1", "is less than 0"),
        ("--die-after", "-5", "is less than 0"),
        ("--faults-after", "-1", "is less than 0"),
        ("--metrics-hang-after", "1e300", "is more than"),
    ],
)
def test_sim_serve_numbers_have_ranges(option: str, value: str, needle: str) -> None:
    # before: --time-scale 0 served at 2 (0 is falsy), the others were taken as given
    args = ["sim", "serve", "--profile", "hisparse384", "--port", "1", option, value]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and needle in result.output, result.output


def test_nightly_sim_is_not_refused_for_repro_history_only(tmp_path: Path) -> None:
    db = str(tmp_path / "h.sqlite")
    # --reason without --accept is the next check: reaching it proves --db was not refused
    result = repro("nightly", "--engine", "sim", "--reason", "x", REPRO_HISTORY=db, timeout=60)
    one_error_line(result, "--reason: only with --accept")
    result = repro("nightly", "--engine", "sim", "--db", db, timeout=60)
    one_error_line(result, "--db: not used by --engine sim")


# ------------------------------------------------------------------ items 3, 4: bounded input

LAUGHS = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
)


def test_yaml_aliases_are_bounded_billion_laughs(tmp_path: Path) -> None:
    # before: `profiles check` died with MemoryError, `simulate` hung expanding 10**9 nodes
    path = tmp_path / "laughs.yaml"
    path.write_text(  # the anchors live inside a free-form JSON-valued serve option
        "extends: cpu-tiny\nserve:\n  max-num-seqs: 4\n  hf-overrides:\n"
        + "\n".join("    " + line for line in LAUGHS.splitlines())
        + "\n"
    )
    with pytest.raises(ConfigError, match=r"aliases expand to more than 200,000 nodes"):
        load_profile(str(path))
    one_error_line(repro("profiles", "show", str(path), timeout=60), "aliases expand")


def test_small_yaml_aliases_and_merges_still_work() -> None:
    assert safe_load("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n") == {
        "base": {"x": 1},
        "other": {"x": 1, "y": 2},
    }


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "a:\n" + "".join(
    " " * i + "b:\n" for i in range(1, 200)
)], ids=["flow", "block"])  # fmt: skip
def test_yaml_nesting_is_bounded(text: str) -> None:
    with pytest.raises(ConfigError, match=r"nested deeper than 64 levels"):
        parse_yaml(text, "x.yaml")


def _two_runs(root: Path) -> tuple[Path, Path]:
    good = write_run(root / "good", "good", [{"parallel": 1, "number": 1, "occupancy": 1.0}])
    bad = write_run(root / "bad", "bad", [{"parallel": 1, "number": 1, "occupancy": 1.0}])
    return good, bad


@pytest.mark.parametrize("damage", ["deep-json", "device", "fifo", "nan", "huge", "folder"])
def test_one_unreadable_run_is_listed_as_unreadable_and_the_others_still_list(
    tmp_path: Path, damage: str
) -> None:
    good, bad = _two_runs(tmp_path)
    manifest = bad / "manifest.json"
    manifest.unlink()
    if damage == "deep-json":
        manifest.write_text("[" * 100_000 + "]" * 100_000)  # before: RecursionError traceback
    elif damage == "device":
        manifest.symlink_to("/dev/zero")  # before: read without end
    elif damage == "fifo":
        os.mkfifo(manifest)  # before: blocked on open for ever
    elif damage == "nan":
        data = json.loads((good / "manifest.json").read_text())
        manifest.write_text(json.dumps({**data, "created_at": float("nan")}))
    elif damage == "huge":
        with manifest.open("wb") as handle:
            handle.truncate(RECORD_BYTES + 1)  # sparse: no disk used
    else:
        manifest.mkdir()
    result = repro("runs", "list", "--out", str(tmp_path), timeout=60)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("good ") and " complete " in line for line in lines), lines
    assert any(line.startswith("bad ") and "unreadable" in line for line in lines), lines


def test_json_records_refuse_nan_and_deep_nesting(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"a": NaN}')
    with pytest.raises(ConfigError, match=r"r\.json: not valid JSON \(NaN is not a JSON number"):
        read_json(path, "record")
    path.write_text("[" * 65 + "]" * 65)
    with pytest.raises(ConfigError, match=r"nested deeper than 64 levels"):
        read_json(path, "record")
    path.write_text("[" * 64 + "]" * 64)
    assert json_depth(read_json(path, "record")) == 64
    path.write_text('{"run_id": "x\\udcffy"}')  # before: `repro report` died encoding it
    with pytest.raises(ConfigError, match=r"not valid JSON \(\\udcff is half of a character"):
        read_json(path, "record")
    path.write_text('["\\ud83d\\ude00"]')  # a pair is one character
    assert read_json(path, "record") == ["\U0001f600"]


# ------------------------------------------------------------------ item 2: records cannot lie


def _complete_with_one_of_five(root: Path) -> Path:
    """What Ctrl-C during `repro simulate` could leave: a complete manifest, 1 of 5 points."""
    run = write_run(root / "cut", "cut", [{"parallel": 1, "number": 1, "occupancy": 1.0}])
    data = json.loads((run / "manifest.json").read_text())
    data["planned_points"] = [point_id(p, p, 0) for p in (1, 2, 4, 8, 16)]
    (run / "manifest.json").write_text(json.dumps(data))
    return run


def test_a_complete_manifest_with_missing_points_is_damaged_everywhere(tmp_path: Path) -> None:
    run = _complete_with_one_of_five(tmp_path)
    problems = run_damage(load_run(run))
    missing = "p002-n0002-r0, p004-n0004-r0, p008-n0008-r0, p016-n0016-r0"
    assert problems == [
        f"manifest says complete but 1 of 5 planned points finished (missing {missing})"
    ]
    listed = repro("runs", "list", "--out", str(tmp_path), timeout=60)
    assert any(x.startswith("cut ") and " damaged " in x for x in listed.stdout.splitlines())
    db = str(tmp_path / "h.sqlite")
    for extra in ([], ["--force"]):  # before: accepted as a baseline
        accept = repro("history", "accept", str(run), "--db", db, *extra, timeout=60)
        one_error_line(accept, str(run), "1 of 5 planned points finished")
    gate = repro("regress", "--candidate", str(run), "--baseline", str(run), timeout=60)
    one_error_line(gate, "damaged run", "1 of 5 planned points finished")


def test_point_ids_that_lie_about_their_folder_or_repeat_are_damage(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "r", "r", [{"parallel": 1, "number": 1, "occupancy": 1.0},
                              {"parallel": 2, "number": 2, "occupancy": 1.0}],
    )  # fmt: skip
    first = run / "points" / point_id(1, 1, 0) / "point.json"
    data = json.loads(first.read_text())
    first.write_text(json.dumps({**data, "point_id": "../../outside"}))
    copy = run / "points" / "extra" / "point.json"
    copy.parent.mkdir()
    copy.write_text((run / "points" / point_id(2, 2, 0) / "point.json").read_text())
    problems = run_damage(load_run(run))
    assert "point_id '../../outside' is not a safe name" in problems
    assert "point_id 'p002-n0002-r0' recorded 2 times" in problems
    one_error_line(
        repro("regress", "--candidate", str(run), "--baseline", str(run), timeout=60),
        "damaged run", "recorded 2 times",
    )  # fmt: skip


def test_a_sound_run_has_no_damage(tmp_path: Path) -> None:
    run = write_run(tmp_path / "ok", "ok", [{"parallel": 1, "number": 1, "occupancy": 1.0}])
    assert run_damage(load_run(run)) == []


# ------------------------------------------------------------------ item 4: readers degrade


BAD_ROWS = [
    b'1.0,2.0,vllm:num_requests_running,"{not json}",1\n',  # bad labels JSON
    b"1.0,2.0,vllm:num_requests_running,{},lots\n",  # a value that is not a number
    b"1.0,2.0,vllm:num_requests_running,{},1\x00\n",  # NUL
    b'1.0,2.0,vllm:num_requests_running,{"a": "\xff\xfe"},1\n',  # not UTF-8
    b"1.0,2.0\n",  # a short row
    b'1.0,2.0,vllm:num_requests_running,"[1, 2]",1\n',  # labels not an object
]


def test_malformed_sample_rows_are_counted_and_the_report_is_written(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", "r", [{"parallel": 1, "number": 1, "occupancy": 1.0}])
    samples = run / "points" / point_id(1, 1, 0) / "samples.csv"
    good = samples.read_bytes()
    samples.write_bytes(good + b"".join(BAD_ROWS))
    kept, bad = read_samples_counted(samples)
    assert bad == len(BAD_ROWS) and len(kept) == good.count(b"\n") - 1
    out = tmp_path / "report.html"
    result = repro("report", str(run), "--out", str(out), timeout=120)  # before: a traceback
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{len(BAD_ROWS)} malformed samples.csv row(s) skipped" in out.read_text()


def test_hand_made_times_that_are_not_times_are_shown_not_raised() -> None:
    assert when(float("nan")) == "invalid time nan"
    assert when(1e300) == "invalid time 1e+300"


# ------------------------------------------------------------------ item 1: escaping per medium


HOSTILE_NAME = "x`\n### spoofed <a href='http://evil'>link</a> | cell \x1b[2J"


def test_markdown_code_spans_and_cells_cannot_be_left() -> None:
    span = for_markdown_code(HOSTILE_NAME)
    assert "\n" not in span and span.startswith("``") and span.endswith("``")
    assert span.count("``") == 2 and "\x1b" not in span and "\\|" in span
    cell = for_markdown(HOSTILE_NAME)
    assert "\n" not in cell and "<a" not in cell and "\\|" in cell and "\\`" in cell


def test_plotly_html_and_terminal_text_is_escaped() -> None:
    assert "<a" not in for_plotly(HOSTILE_NAME) and "&lt;a href=" in for_plotly(HOSTILE_NAME)
    assert "<a" not in for_html(HOSTILE_NAME) and "&#x27;" in for_html(HOSTILE_NAME)
    shown = for_terminal("a\x1b[31mb\u202ec\x9bd")
    assert shown == "a\\x1b[31mb\\u202ec\\x9bd"


def test_timeseries_legends_and_titles_show_markup_literally(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "r", "r", [{"parallel": 1, "number": 1, "occupancy": 1.0}])
    run = load_run(run_dir)
    series = [replace(s, name="<a href='http://evil'>x</a>") for s in run_series([run])]
    run.points[0].label = "<b>c1</b>"
    ((_, _, fig),) = timeseries_figures([run], series)
    names = {trace.name for trace in fig.data}
    assert names == {"&lt;a href='http://evil'&gt;x&lt;/a&gt;"}  # before: a live link
    assert fig.layout.title.text.startswith("&lt;b&gt;c1&lt;/b&gt;: /metrics")


def test_regress_markdown_names_stay_in_their_code_span(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", "r", [{"parallel": 1, "number": 1, "occupancy": 1.0}])
    from harness.gate.judge import regress

    verdict = regress(run, baseline_dir=run)
    verdict.candidate, verdict.notes = HOSTILE_NAME, [HOSTILE_NAME]  # as a history entry's name
    text = render_markdown(verdict)
    # before: the newline closed the code span and "### spoofed" became a heading
    assert "\n###" not in text and not any(
        line.startswith("### spoofed") for line in text.split("\n")
    )
    (line,) = [x for x in text.split("\n") if x.startswith("- candidate: ")]
    assert line.startswith("- candidate: ``x`\\x0a### spoofed <a") and line.endswith("``")
    (note,) = [x for x in text.split("\n") if x.startswith("- note: ")]
    assert "<a" not in note and "&lt;a" in note  # outside a code span markup is escaped


# ------------------------------------------------------------------ item 2: dataset outputs


def test_a_second_build_into_the_same_output_fails_while_the_first_runs(tmp_path: Path) -> None:
    output = tmp_path / "d.json"
    with open(output.with_name("d.json.lock"), "a") as held:  # a first build is running
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = repro("dataset", "build", "cpu-tiny", "--output-path", str(output), timeout=120)
    # before: both builds exited 0 and the later one silently replaced the other
    one_error_line(result, str(output), "another `repro dataset build` is writing it")
    assert not output.exists()


def test_a_checksum_mismatch_is_refused_where_the_data_is_used(tmp_path: Path) -> None:
    data = tmp_path / "d.json"
    data.write_text('{"metadata": {}, "conversations": [[{"messages": []}]]}')
    sidecar = tmp_path / "d.json.manifest.json"
    sidecar.write_text(json.dumps({"output": {"sha256": "ab" * 32}}))
    with pytest.raises(DatasetError, match=r"d\.json: sha256 \w+ does not match abababab"):
        ensure_dataset(str(data))  # what `repro sweep --dataset FILE` uses; before: "stale" only
    result = repro("dataset", "verify", str(data), "--tokenizer", "tiny:tokenizer", timeout=120)
    assert result.returncode == 2 and "does not match abababababab recorded in d.json." in (
        result.stderr
    ), result.stderr[-2000:]


def test_an_interrupted_forced_build_leaves_no_old_sidecar_beside_new_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.dataset import builder
    from harness.dataset.recipe import load_recipe

    output = tmp_path / "d.json"
    recipe = load_recipe("cpu-tiny")
    builder.build_dataset(recipe, output)
    old_sidecar = (tmp_path / "d.json.manifest.json").read_text()
    writes = []
    real_write = builder._atomic_write_bytes

    def interrupted(path: Path, data: bytes) -> None:
        writes.append(path.name)
        if path.name.endswith(".manifest.json"):
            raise KeyboardInterrupt  # Ctrl-C between the data and its sidecar
        real_write(path, data + b" ")  # other bytes than the first build's

    monkeypatch.setattr(builder, "_atomic_write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        builder.build_dataset(recipe.model_copy(update={"seed": 7}), output)
    assert writes == ["d.json", "d.json.manifest.json"]
    sidecar = tmp_path / "d.json.manifest.json"
    # before: the old sidecar stayed beside the new data, its sha256 silently wrong
    assert not sidecar.exists() or sidecar.read_text() != old_sidecar
