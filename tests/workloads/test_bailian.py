"""Bailian session traces (tests/data/bailian/sessions.jsonl, hand-made): sessions from parent links, turns in
order (the first at its recorded time, each later one its recorded gap after the previous answer), each bad field one line; on the sim, prefix sharing exactly where the hash ids
share blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.spec import parse_spec
from harness.workloads import PromptBuilder, build_schedule
from tests.helpers.cli import run_bench
from tests.helpers.specs import SIM_FAST, TIMEOUTS, spec, write_yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "bailian" / "sessions.jsonl"


def trace_spec(path: Path = DATA, **over: Any) -> dict[str, Any]:
    wl = {"kind": "trace", "format": "bailian", "path": str(path), "speedup": 10, **over}
    return spec("bailian", wl, api="openai-completions")


def test_sessions_turns_and_arrivals() -> None:
    s = parse_spec(trace_spec(), "b.yaml")
    assert s.workload.block_tokens == 16  # the trace's own blocks by default
    sched = build_schedule(s, None, 0)
    convs = list(sched.conversations)
    assert [[r.index for r in c.turns] for c in convs] == [[0, 3, 5], [1, 4], [2]]
    assert [[r.turn for r in c.turns] for c in convs] == [[0, 1, 2], [0, 1], [0]]
    # the first turn at its recorded time / speedup 10, each later one its recorded gap after the answer
    assert [r.arrival for r in convs[0].turns] == [0.0, None, None]
    assert [r.gap for r in convs[0].turns] == [None, 0.2, 0.3]
    assert [r.arrival for c in convs for r in c.turns[:1]] == [0.0, 0.05, 0.1]
    assert [r.question_tokens for r in convs[0].turns] == [40, 72, 100]
    assert [r.index for r in sched.requests()] == list(range(6)) and len(sched) == 6


def test_block_exact_prompts() -> None:
    s = parse_spec(trace_spec(), "b.yaml")
    sched = build_schedule(s, None, 0)
    builder = PromptBuilder(sched, s.api)
    words = {r.index: builder.build(c, r, []).payload.split() for c in sched.conversations for r in c.turns}
    assert [len(words[i]) for i in range(6)] == [40, 48, 32, 72, 80, 100]
    assert words[3][:40] == words[0] and words[3][40] != words[0][-1]  # block 3 continues past the cut
    assert words[1][:32] == words[0][:32] and words[1][32] != words[0][32]  # blocks 1, 2 shared, then not
    assert words[2][0] != words[0][0]


def test_scaled_blocks() -> None:
    sched = build_schedule(parse_spec(trace_spec(block_tokens=32), "b.yaml"), None, 0)
    assert [r.question_tokens for r in sched.requests()] == [80, 96, 64, 144, 160, 200]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ({"chat_id": -1}, "line 1: chat_id: expected a non-negative integer, got -1"),
        (
            {"parent_chat_id": "x"},
            "line 1: parent_chat_id: expected -1 (a first request) or a chat id, got 'x'",
        ),
        ({"timestamp": None}, "line 1: timestamp: expected a non-negative number of seconds, got None"),
        ({"hash_ids": [1, 2]}, "line 1: hash_ids: 2 ids, but input_length 40 needs 3 (one per 16 tokens)"),
        ({"input_length": 0}, "line 1: input_length: expected a positive integer, got 0"),
    ],
)
def test_a_bad_line_is_one_error(tmp_path: Path, line: dict, words: str) -> None:
    good = json.loads(DATA.read_text().splitlines()[0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**good, **line}) + "\n")
    with pytest.raises(HarnessError) as e:
        build_schedule(parse_spec(trace_spec(bad), "b.yaml"), None, 0)
    assert str(e.value) == f"{bad}: {words}"


def lcp(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.slow
def test_replayed_on_the_sim_with_block_exact_sharing(tmp_path: Path) -> None:
    """At its recorded times (/ 2: 0.25 s or more apart, far more than a request takes on this sim), so every
    earlier request is cached: each request finds exactly its longest common token prefix with an earlier
    prompt (one token short of the whole, as SGLang always computes one)."""
    server = {
        "name": "sim",
        "launch": "sim",
        "args": [*SIM_FAST, "--enable-cache-report", "--enable-metrics"],
    }
    raw = {**trace_spec(speedup=2), "concurrency": 3, "timeouts": TIMEOUTS, "servers": [server]}
    r = run_bench(tmp_path, "--spec", str(write_yaml(tmp_path / "b.yaml", raw)), timeout=120)
    # six timed requests: on a busy machine the first one's start-up lateness alone can flag client-late
    # (exit 1); the sharing checked here does not depend on it
    assert r.returncode == 0 or "flagged points (client-late" in r.stdout, r.stdout + r.stderr
    s = parse_spec(trace_spec(speedup=2), "b.yaml")
    sched = build_schedule(s, None, 0)
    builder = PromptBuilder(sched, s.api)
    words = {r.index: builder.build(c, r, []).payload.split() for c in sched.conversations for r in c.turns}
    expected = {
        i: min(max([lcp(words[i], words[j]) for j in range(i)], default=0), len(words[i]) - 1) for i in words
    }
    lines = (
        (tmp_path / "capture" / "n" / "bailian" / "sim" / "seed=0" / "requests.jsonl")
        .read_text()
        .splitlines()
    )
    recs = {rec["index"]: rec for rec in map(json.loads, lines)}
    got = {i: recs[i]["cached_tokens"] or 0 for i in recs}
    print("cached tokens per request:", got)
    assert got == expected and expected == {0: 0, 1: 32, 2: 0, 3: 40, 4: 48, 5: 72}
    assert all(recs[i]["prompt_tokens"] == len(words[i]) for i in recs)
    t0 = recs[0]["scheduled_mono"]  # the run start: request 0 is due at once
    for i, at in ((0, 0.0), (1, 0.25), (2, 0.5)):  # a first turn: its recorded time / speedup from the start
        assert recs[i]["scheduled_mono"] - t0 == pytest.approx(at, abs=1e-6)
        assert recs[i]["sent_mono"] >= recs[i]["scheduled_mono"]
    # a later turn: the previous answer's receipt + its recorded gap / speedup, as the records stamp them
    for a, b, gap in ((0, 3, 1.0), (3, 5, 1.5), (1, 4, 1.25)):
        assert recs[b]["scheduled_mono"] == pytest.approx(recs[a]["done_mono"] + gap, abs=1e-6), (a, b)
        assert recs[b]["sent_mono"] >= recs[b]["scheduled_mono"]
