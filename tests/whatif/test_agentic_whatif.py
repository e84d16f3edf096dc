"""Agentic traces offline (issue 59): `harness whatif` and `harness advise` read the sample folder (or one
file) as a fleet of closed-loop agents, and report the per-conversation hit-rate distribution beside the
overall rate, the unbounded cache's too; a bad file is one line naming the file, request and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.whatif.inputs import read_input
from tests.helpers.cli import harness

DATA = Path(__file__).resolve().parents[1] / "data" / "agentic"


def test_folder_and_file_read_as_closed_loop_agents() -> None:
    trace = read_input(DATA)
    assert trace.kind == "blocks" and trace.unit == 64 and trace.concurrency == 5
    assert len(trace.requests) == 66 and {r.conversation for r in trace.requests} == set(range(5))
    assert trace.notes[0].startswith("agentic: 5 conversations, 66 requests, 2 sub-agents; hash ids local")
    later = [r for r in trace.requests if r.turn]
    assert all(r.arrival == 0.0 for r in trace.requests) and any(r.gap > 0 for r in later)
    one = read_input(DATA / "trace_0504.json")
    assert len(one.requests) == 3 and one.requests[2].gap == 3058.0  # its recorded think time
    assert all(len(r.key) == r.tokens // 64 for r in one.requests)  # full blocks only: a tail never hits


@pytest.mark.slow
def test_whatif_and_advise_report_per_conversation_rates(tmp_path: Path) -> None:
    r = harness("whatif", str(DATA), "--pool", "3000,100000", "--policy", "lru", "--json")
    assert r.returncode == 0, r.stderr
    small, big = json.loads(r.stdout)[0]["results"]
    assert big["evicted_tokens"] == 0 and big["hit_rate"] == big["ideal_hit_rate"]
    ideal = big["per_conversation_hit_rate"]["ideal"]
    assert big["per_conversation_hit_rate"] == {**ideal, "ideal": ideal} and ideal["conversations"] == 5
    assert ideal["p10"] <= ideal["p50"] <= ideal["p90"] and ideal["p90"] > big["hit_rate"]
    pc = small["per_conversation_hit_rate"]
    assert small["evicted_tokens"] > 0 and pc["ideal"] == ideal and pc["p50"] < ideal["p50"]
    r = harness("advise", str(DATA), "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    cand = json.loads(r.stdout)["candidates"][0]
    assert cand["per_conversation_hit_rate"]["ideal"] == ideal


@pytest.mark.slow
def test_bad_file_is_one_line(tmp_path: Path) -> None:
    data = json.loads((DATA / "trace_0504.json").read_text())
    data["requests"][1]["out"] = -3
    bad = tmp_path / "trace_x.json"
    bad.write_text(json.dumps(data))
    r = harness("whatif", str(tmp_path), "--pool", "1000")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .endswith(f"{bad}: request 1: out: expected a non-negative integer, got -3")
    ), r.stderr
