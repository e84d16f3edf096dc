"""Request classes and the zero-reuse salt on built schedules; end to end on the sim, the issue's check:
with a pool too small for every session, `priority` keeps the high class's sessions cached and `lru` does not."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from harness.spec import parse_spec
from harness.spec.traffic import PriorityClass
from harness.workloads import PromptBuilder, build_schedule
from harness.workloads.schedule import BuiltPrompt
from harness.workloads.traffic import draw_class, salted
from tests.helpers.cli import run_bench
from tests.helpers.specs import SIM_FAST, TIMEOUTS, multi_turn, shared_prefix, spec, write_yaml

CLASSES = [{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 1, "value": 0}]


def test_the_draw_is_seeded_and_follows_the_shares() -> None:
    classes = (PriorityClass("a", 3.0, 1), PriorityClass("b", 1.0, 2))
    drawn = Counter(draw_class(classes, 7, u).name for u in range(4000))
    assert 0.72 < drawn["a"] / 4000 < 0.78
    assert [draw_class(classes, 7, u) for u in range(50)] == [draw_class(classes, 7, u) for u in range(50)]
    assert [draw_class(classes, 7, u) for u in range(50)] != [draw_class(classes, 8, u) for u in range(50)]


def test_every_turn_of_a_session_carries_its_class() -> None:
    wl = multi_turn(sessions=12, turns=3, system_prompt_tokens=8, question_tokens=4, answer_tokens=4)
    s = parse_spec(spec("t", wl, priorities=CLASSES), "t.yaml")
    sched = build_schedule(s, None, 0)
    by_session: dict[int | None, set] = {}
    for r in sched.requests():
        by_session.setdefault(r.session, set()).add((r.priority_class, r.priority))
    assert all(len(v) == 1 for v in by_session.values()) and len(by_session) == 12
    assert {next(iter(v)) for v in by_session.values()} == {("high", 10), ("low", 0)}


def test_a_lazy_shared_prefix_schedule_is_classed_by_group() -> None:
    s = parse_spec(spec("t", shared_prefix(groups=6, prompts_per_group=3), priorities=CLASSES), "t.yaml")
    sched = build_schedule(s, None, 1)
    pairs = {(r.group, r.priority_class) for r in sched.requests()}
    assert len(pairs) == 6 and len(sched) == 18
    assert {c for _, c in pairs} == {"high", "low"}


def test_without_priorities_nothing_is_classed() -> None:
    s = parse_spec(spec("t", shared_prefix()), "t.yaml")
    assert all(r.priority is None and r.priority_class is None for r in build_schedule(s, None, 0).requests())


def test_salted_prompts_share_no_first_token_and_keep_their_count() -> None:
    wl = multi_turn(sessions=2, turns=2, system_prompt_tokens=16, question_tokens=4, answer_tokens=4)
    s = parse_spec(spec("t", wl, api="openai-completions", salt="per-request"), "t.yaml")
    sched = build_schedule(s, None, 3)
    builder = PromptBuilder(sched, s.api)
    convs = {c.id: c for c in sched.conversations}
    built = [builder.build(convs[r.conversation], r, []) for r in sched.requests()]
    firsts = [b.payload.split()[0] for b in built]
    assert len(set(firsts)) == len(firsts) == 4
    plain = PromptBuilder(
        build_schedule(parse_spec(spec("t", wl, api="openai-completions"), "t.yaml"), None, 3), s.api
    )
    r0 = next(iter(sched.requests()))
    assert built[0].expected_tokens == plain.build(convs[r0.conversation], r0, []).expected_tokens + 1


def test_salted_token_ids_differ_in_their_first_id() -> None:
    ids = BuiltPrompt([5, 6, 7], 3, "x")
    a, b = salted(ids, 0, 1, word=False), salted(ids, 0, 2, word=False)
    assert a.payload[0] != b.payload[0] and a.payload[2:] == [5, 6, 7] and a.expected_tokens == 5
    assert salted(BuiltPrompt("a b", 2, "x"), 0, 1, word=False).expected_tokens is None  # a local tokenizer


@pytest.mark.slow
def test_priority_keeps_the_high_class_cached_and_lru_does_not(tmp_path: Path) -> None:
    """8 sessions of 4 turns (~2,600 tokens in all at the end) through a 1,600-token pool, two at a time."""
    server = {
        "name": "{policy}",
        "launch": "sim",
        "args": [*SIM_FAST, "--max-total-tokens", "1600", "--enable-cache-report", "--radix-eviction-policy", "{policy}"],
    }  # fmt: skip
    wl = multi_turn(sessions=8, turns=4, system_prompt_tokens=100, question_tokens=30, answer_tokens=20)
    raw = spec("prio", wl, concurrency=2, seeds=[0], priorities=CLASSES, timeouts=TIMEOUTS,
               servers=[server], matrix={"policy": ["priority", "lru"]})  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(write_yaml(tmp_path / "prio.yaml", raw)), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    points = {
        p["server"]: p["median"]
        for p in json.loads((tmp_path / "summaries" / "n.json").read_text())["points"]
    }
    prio, lru = points["priority"]["hit_rate_usage_by_class"], points["lru"]["hit_rate_usage_by_class"]
    assert points["priority"]["requests_by_class"] == {"high": 16, "low": 16}
    print(
        f"hit rate high / low: priority {prio['high']:.1%} / {prio['low']:.1%}, lru {lru['high']:.1%} / {lru['low']:.1%}"
    )
    assert prio["high"] > prio["low"] + 0.25  # measured: 65.1 % against 23.1 %
    assert abs(lru["high"] - lru["low"]) < 0.1  # measured: 18.9 % against 23.1 %
    assert prio["high"] > lru["high"] + 0.25
    assert set(points["priority"]["ttft_p99_s_by_class"]) == {"high", "low"}
    records = (tmp_path / "capture" / "n" / "prio" / "priority" / "seed=0" / "requests.jsonl").read_text()
    assert {json.loads(line)["priority_class"] for line in records.splitlines()} == {"high", "low"}
    md = (tmp_path / "summaries" / "n.md").read_text()
    assert "By priority class" in md


@pytest.mark.slow
def test_the_zero_reuse_control_reads_zero_on_the_sim(tmp_path: Path) -> None:
    """The same multi-turn spec (every turn resends its session) salted and not: 0.0 % against well above."""
    server = {
        "name": "sim",
        "launch": "sim",
        "args": [*SIM_FAST, "--enable-cache-report", "--enable-metrics"],
    }
    wl = multi_turn(sessions=3, turns=3, system_prompt_tokens=64, question_tokens=16, answer_tokens=8)
    args = []
    for name, api, tok, salt in (("salted", "openai-completions", "word", "per-request"),
                                 ("salted-ids", "sglang-generate", "server", "per-request"),
                                 ("plain", "openai-completions", "word", None)):  # fmt: skip
        extra = {"salt": salt} if salt else {}
        raw = spec(name, wl, api=api, tokenizer=tok, seeds=[0], timeouts=TIMEOUTS, servers=[server], **extra)
        args += ["--spec", str(write_yaml(tmp_path / f"{name}.yaml", raw))]
    r = run_bench(tmp_path, *args, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    points = {
        p["experiment"]: p for p in json.loads((tmp_path / "summaries" / "n.json").read_text())["points"]
    }
    for name in ("salted", "salted-ids"):
        p = points[name]
        print(name, "measured hit rate:", p["measured_hit_rate"], "log:", p["median"]["hit_rate_log"])
        assert p["measured_hit_rate"] == 0.0 and p["median"]["hit_rate_log"] == 0.0
        assert p["median"]["hit_rate_counters"] == 0.0 and "salted-hits" not in p["cache_flags"]
        assert p["cache_state"] == "cold"
    assert points["plain"]["measured_hit_rate"] > 0.3


def test_a_local_tokenizer_is_salted_with_its_own_one_token_words() -> None:
    """Subword tokenizers split an invented word (`salt0r1` -> s, alt, 0, r, 1): the shared head would be
    cached; whole one-token words in front make the first token differ instead."""
    words = (" apple", " pear", " fig")
    a, b = (salted(BuiltPrompt("hello there", 2, "x"), 0, i, word=False, words=words) for i in (1, 2))
    assert a.payload == " pear apple hello there" and b.payload.startswith(" fig apple ")
    assert a.expected_tokens is None and a.sha != b.sha
