"""Bad input through the real CLI (issue 8, item 3): one line naming the culprit, exit code 2, no traceback.

The spec loader's messages are checked case by case in tests/spec/test_spec.py (in process); here each kind of
bad input goes through `python -m harness ...` as a user would meet it.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import harness

pytestmark = pytest.mark.slow  # every test here starts a process

WORKLOAD = {
    "kind": "shared-prefix",
    "groups": 1,
    "prompts_per_group": 2,
    "system_prompt_tokens": 8,
    "question_tokens": 2,
    "output_tokens": 2,
}
NOBODY = "http://127.0.0.1:9"  # never reached: each spec error is raised before the server is contacted


def one_line_error(r: subprocess.CompletedProcess, command: str) -> str:
    """The single stderr line of a rejected command (exit 2), checked for shape."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"harness {command}: error: "), lines[0]
    return lines[0]


def spec_text(**over) -> str:
    return yaml.safe_dump({"name": "exp", "model": "m", "workload": dict(WORKLOAD), **over})


SPEC_CASES = [
    ("malformed-yaml", "name: exp\nmodel: [unclosed\n", "", "not valid YAML (line 3"),
    ("unknown-key", spec_text(colour="red"), "colour", "unknown key"),
    ("wrong-type", spec_text(concurrency="many"), "concurrency", "expected a positive integer, got 'many'"),
    (
        "impossible-value",
        spec_text(max_failed_fraction=1.5),
        "max_failed_fraction",
        "expected a number between 0 and 1, got 1.5",
    ),
    ("impossible-timeout", spec_text(timeouts={"total": 0}), "timeouts.total", "expected a positive number"),
    ("sweep-unknown-key", spec_text(sweep={"colour": [1, 2]}), "sweep.colour", "unknown key"),
    ("tokenizer-missing", spec_text(tokenizer="./no-such-tokenizer"), "tokenizer", "does not exist"),
    ("rate-zero", spec_text(request_rate=0), "request_rate", "expected a positive number, got 0"),
    ("rate-negative", spec_text(request_rate=-2), "request_rate", "expected a positive number, got -2"),
    ("arrival-unknown", spec_text(request_rate=5, arrival="uniform"), "arrival", "expected one of poisson"),
    (
        "burstiness-zero",
        spec_text(request_rate=5, arrival="gamma", burstiness=0),
        "burstiness",
        "expected a positive number, got 0",
    ),
    ("slo-unknown-key", spec_text(slo={"ttft": 300}), "slo.ttft", "unknown key"),
    ("slo-bound", spec_text(slo={"ttft_ms": 0}), "slo.ttft_ms", "expected a positive number, got 0"),
    ("warmup-negative", spec_text(warmup_requests=-1), "warmup_requests", "expected a non-negative integer"),
    ("duration-negative", spec_text(duration_s=-5), "duration_s", "expected a positive number, got -5"),
    (
        "priority-share",
        spec_text(priorities=[{"name": "high", "share": -1, "value": 1}]),
        "priorities[0].share",
        "expected a positive number, got -1",
    ),
    ("salt-unknown", spec_text(salt="sometimes"), "salt", "expected one of per-request, got 'sometimes'"),
    (
        "sweep-rate-zero",
        spec_text(sweep={"request_rate": [1, 0]}),
        "sweep.request_rate[1]",
        "positive number",
    ),
]


@pytest.mark.parametrize(
    ("text", "key", "words"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES]
)
def test_bad_spec_through_harness_run(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    cap = tmp_path / "cap"
    r = harness("run", str(path), "--server-url", NOBODY, "--capture", str(cap))
    line = one_line_error(r, "run")
    where = f"{path}: {key}: " if key else f"{path}: "
    assert line.startswith(f"harness run: error: {where}") and words in line, line
    assert not cap.exists(), "nothing is written for a spec that was rejected"


def test_bad_spec_through_harness_bench_dry_run(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(spec_text(sweep={"turns": [1, 2]}))  # a multi-turn key on a shared-prefix workload
    r = harness("bench", "--spec", str(path), "--server-kind", "sim", "--dry-run", cwd=tmp_path)
    line = one_line_error(r, "bench")
    assert f"{path}: sweep.turns: unknown key for a shared-prefix workload" in line


def test_tlru_threshold_not_above_estimate_through_harness_bench(tmp_path: Path) -> None:
    cfg = '{"threshold": {t}, "next_prompt_estimate": 128}'
    args = ["--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", cfg]
    server = {"name": "tlru-{t}", "launch": "sim", "args": args}
    path = tmp_path / "exp.yaml"
    path.write_text(spec_text(servers=[server], matrix={"t": [256, 64]}))
    r = harness("bench", "--spec", str(path), "--server-kind", "sim", "--dry-run", cwd=tmp_path)
    line = one_line_error(r, "bench")
    assert f"{path}: servers[0].args: tlru needs threshold > next_prompt_estimate" in line
    assert "got threshold 64 <= next_prompt_estimate 128" in line


def test_port_already_in_use_for_serve_sim(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = harness("serve-sim", "--port", str(port), "--card-profile", "tiny-test", cwd=tmp_path, timeout=30)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    # the lines before it are the server's own startup log, as SGLang prints them; the verdict is one line
    assert len(errors) == 1 and errors[0] == r.stderr.strip().splitlines()[-1]
    assert errors[0].startswith(f"harness serve-sim: error: --port {port}: cannot listen on 127.0.0.1:{port}")
    assert "in use" in errors[0]


def test_capture_from_a_different_spec_version_is_refused(fake_server, tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    cap = tmp_path / "cap"
    path.write_text(spec_text(seeds=[0]))
    run = ("run", str(path), "--server-url", fake_server.url, "--node", "n", "--capture", str(cap), "--quiet")
    assert harness(*run).returncode == 0
    path.write_text(spec_text(seeds=[0, 1]))  # more seeds: the same experiment, resumed
    assert harness(*run).returncode == 0
    assert sorted(p.name for p in (cap / "n" / "exp" / "attached").iterdir()) == [
        "seed=0",
        "seed=1",
    ]
    before = (cap / "n" / "exp" / "manifest.json").read_text()
    path.write_text(spec_text(seeds=[0, 1], workload={**WORKLOAD, "system_prompt_tokens": 64}))
    line = one_line_error(harness(*run), "run")
    assert f"{cap / 'n' / 'exp'}: holds points of a different version of {path}" in line
    assert "use another --capture or --node" in line
    assert (cap / "n" / "exp" / "manifest.json").read_text() == before  # nothing touched
    moved = (
        "run",
        str(path),
        "--server-url",
        fake_server.url,
        "--node",
        "n2",
        "--capture",
        str(cap),
        "--quiet",
    )
    assert harness(*moved).returncode == 0  # the advice works


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"hello": 1}', "not a"),
        (b"[1, 2, 3]", "not a"),
        (bytes(range(256)) * 4, "unreadable"),
    ],
    ids=["other-json", "json-list", "binary"],
)
def test_a_summary_that_is_not_one(tmp_path: Path, content: bytes, words: str) -> None:
    bad = tmp_path / "node.json"
    bad.write_bytes(content)
    for command in ("report", "validate"):
        line = one_line_error(harness(command, str(bad), cwd=tmp_path), command)
        assert str(bad) in line and words in line, line
    assert not list(tmp_path.glob("*.md")) and not list(tmp_path.glob("*.png"))


def test_a_capture_folder_that_is_not_one(tmp_path: Path) -> None:
    (tmp_path / "junk" / "x").mkdir(parents=True)
    (tmp_path / "junk" / "x" / "file.txt").write_text("hello")
    line = one_line_error(harness("summarize", str(tmp_path / "junk"), cwd=tmp_path), "summarize")
    assert str(tmp_path / "junk") in line and "manifest.json" in line


def test_a_log_that_is_not_an_sglang_log_is_parsed_and_counted(tmp_path: Path) -> None:
    log = tmp_path / "nginx.log"
    good = (
        "[2025-08-01 10:00:00] Prefill batch. #new-seq: 1, #new-token: 10, #cached-token: 30, "
        "token usage: 0.01, #running-req: 0, #queue-req: 0,"
    )
    noise = [
        b'127.0.0.1 - - [01/Aug/2025:10:00:00 +0000] "GET / HTTP/1.1" 200 612',
        bytes(range(1, 256)).replace(b"\n", b""),
        b"\xff\xfe\x00garbage\r",
        good.encode(),
        b"",
        b"Traceback (most recent call last):",
    ]
    log.write_bytes(b"\n".join(noise) + b"\n")
    r = harness("parse-log", str(log), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    head = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"{log}: "))
    assert "prefill 1" in head and "unknown" in head, head
    # every non-empty line is either parsed or counted
    unknown = int(head.split("unknown ")[1].split(",")[0])
    assert unknown >= 4
    missing = one_line_error(harness("parse-log", str(tmp_path / "absent.log"), cwd=tmp_path), "parse-log")
    assert "absent.log" in missing


def test_parse_log_json_summary_counts_the_rest(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"nothing here\n\x00\x01\xff\n\n")
    r = harness("parse-log", str(log), "--json", cwd=tmp_path)
    # no server line at all: the summary still comes, one line says so, exit 1
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and "no SGLang or vLLM server log lines among 3 lines" in r.stderr
    plain = harness("parse-log", str(log), cwd=tmp_path)
    assert plain.returncode == 1 and "no SGLang or vLLM server log lines" in plain.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])["summary"]
    # blank lines are neither records nor errors; the other two are counted, one as undecodable
    assert summary["lines"] == 3 and summary["by_kind"] == {"unknown": 2}
    assert summary["undecodable_lines"] == 1


def test_unwritable_capture_folder_for_harness_run(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(spec_text())
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    line = one_line_error(
        harness("run", str(path), "--server-url", NOBODY, "--capture", str(blocker / "cap")), "run"
    )
    assert line.startswith(f"harness run: error: capture {blocker / 'cap'}: not writable")
    assert "--capture" in line  # checked before the server is contacted (NOBODY would refuse)
