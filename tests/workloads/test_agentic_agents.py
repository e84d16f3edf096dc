"""`agents: N` on an agentic trace (the five sample conversations): N sessions of seeded draws, every file
replayed at least once, a repeated file in an id space of its own, and the `agents` search knob with its
default SLO (TTFT p95 <= 2 s); bad values are one line naming the key."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.errors import SpecError
from harness.spec import parse_spec
from harness.workloads import build_schedule
from tests.helpers.specs import spec

DATA = Path(__file__).resolve().parents[1] / "data" / "agentic"
SIZES = {18, 32, 5, 3, 8}  # requests per sample conversation (one with its sub-agents)


def agents_spec(**over: Any) -> dict[str, Any]:
    wl = {"kind": "trace", "format": "agentic", "path": str(DATA), "block_tokens": 4, **over}
    return spec("agentic", wl, api="openai-completions")


def _draws(sched: Any) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for r in sched.requests():
        out.setdefault(r.session, []).append(r)
    return out


def test_agents_are_sessions_of_seeded_draws() -> None:
    s = parse_spec(agents_spec(agents=2, speedup=10), "a.yaml")
    assert s.workload.agents == 2
    sched = build_schedule(s, None, 0)
    convs = list(sched.conversations)
    assert len(convs) == 2  # two agents, five draws between them
    draws = _draws(sched)
    assert len(draws) == 5 and sorted(len(v) for v in draws.values()) == sorted(SIZES)
    for c in convs:
        assert c.turns[0].arrival == 0.0 and c.turns[0].gap is None  # both agents start at the start
        starts = [r for r in c.turns[1:] if r.turn == 0]
        assert starts and all(r.gap == 0.0 for r in starts)  # the next draw goes at once
        assert [r.index for r in c.turns] == sorted(r.index for r in c.turns)
    assert sorted(r.index for r in sched.requests()) == list(range(len(sched)))
    again = build_schedule(s, None, 0)
    assert [r.session for r in again.requests()] == [r.session for r in sched.requests()]
    other = build_schedule(s, None, 1)  # another seed, another draw order
    assert [len(c.turns) for c in other.conversations] != [len(c.turns) for c in convs] or [
        r.question_tokens for r in other.requests()
    ] != [r.question_tokens for r in sched.requests()]


def test_more_agents_than_files_repeat_files_in_their_own_ids() -> None:
    sched = build_schedule(parse_spec(agents_spec(agents=12), "a.yaml"), None, 0)
    convs = list(sched.conversations)
    assert len(convs) == 12 and all(c.turns for c in convs)
    draws = _draws(sched)
    assert len(draws) == 12
    sizes = Counter(len(v) for v in draws.values())
    assert set(sizes) == SIZES and sum(sizes.values()) == 12
    # two draws of one file: the same shape, no block in common (a repeated file is not a free hit)
    twins = [v for v in draws.values() if len(v) == 32]
    assert len(twins) >= 2
    a, b = (set(twins[k][0].question.hash_ids) for k in range(2))  # type: ignore[attr-defined]
    assert a and not a & b


@pytest.mark.parametrize(
    ("wl", "key", "words"),
    [
        ({"agents": 0}, "workload.agents", "positive integer"),
        ({"agents": "many"}, "workload.agents", "positive integer"),
        ({"format": "mooncake", "agents": 2}, "workload.agents", "format: agentic"),
    ],
)
def test_bad_agents_is_one_line(tmp_path: Path, wl: dict[str, Any], key: str, words: str) -> None:
    raw = agents_spec(**wl)
    if raw["workload"]["format"] == "mooncake":
        f = tmp_path / "t.jsonl"
        f.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n')
        raw["workload"]["path"] = str(f)
    with pytest.raises(SpecError) as e:
        parse_spec(raw, "a.yaml")
    assert key in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_agents_knob_ramps_with_default_slo() -> None:
    s = parse_spec({**agents_spec(), "search": {"knob": "agents", "lo": 1, "hi": 64}}, "a.yaml")
    assert s.search is not None and s.search.integer
    assert s.search.slo == {"ttft_ms": 2000.0} and s.search.percentile == 95.0
    p = s.probe_point(7)
    assert p.sweep == {"agents": 7} and p.workload.agents == 7 and p.concurrency >= 7
    own = parse_spec(
        {**agents_spec(), "search": {"knob": "agents", "lo": 1, "hi": 8, "slo": {"ttft_ms": 500}}}, "a.yaml"
    )
    assert own.search is not None and own.search.slo == {"ttft_ms": 500.0}
    with pytest.raises(SpecError, match=r"search\.knob.*agents.*format agentic"):
        parse_spec(
            {
                **spec(
                    "mt",
                    {
                        "kind": "multi-turn",
                        "sessions": 2,
                        "turns": 2,
                        "system_prompt_tokens": 8,
                        "question_tokens": 8,
                        "answer_tokens": 8,
                    },
                ),
                "search": {"knob": "agents", "lo": 1, "hi": 4},
            },
            "a.yaml",
        )


def test_agents_sweep() -> None:
    s = parse_spec({**agents_spec(), "sweep": {"agents": [1, 3]}}, "a.yaml")
    assert [p.workload.agents for p in s.points()] == [1, 3]


def test_agents_ramp_is_judged_by_its_slo_alone() -> None:
    """Agents think between requests: flat throughput with a rising TTFT is no saturation for the ramp
    (it is for concurrency), so the ramp climbs until TTFT p95 passes 2 s."""
    from harness.spec.search import SearchSpec
    from harness.summarize.capacity import SeedRun, measure_probe, replay

    def rows(ttft_ms: float) -> list[dict[str, Any]]:  # 20 requests over 5 s whatever the knob
        return [
            {
                "ok": True,
                "ttft_s": ttft_ms / 1000,
                "e2e_s": ttft_ms / 1000 + 0.1,
                "tpot_s": 0.01,
                "completion_tokens": 8,
                "scheduled_mono": i / 4,
                "done_mono": i / 4 + ttft_ms / 1000 + 0.1,
            }
            for i in range(20)
        ]

    ramp = SearchSpec("agents", 2, 16, {"ttft_ms": 2000.0}, percentile=95.0)
    conc = SearchSpec("concurrency", 2, 16, {"ttft_ms": 2000.0}, percentile=95.0)
    for search, want in ((ramp, "pass"), (conc, "saturated")):
        m = {
            v: measure_probe(v, [SeedRun("ok", None, rows(t), None)], search)
            for v, t in ((2, 100.0), (4, 400.0))
        }
        assert replay(search, m)[0][4].status == want
    over = {2: 100.0, 4: 400.0, 8: 2500.0}
    m = {v: measure_probe(v, [SeedRun("ok", None, rows(t), None)], ramp) for v, t in over.items()}
    judged, nxt = replay(ramp, m)
    assert judged[8].status == "over" and "p95 ttft_ms" in (judged[8].reason or "") and nxt == 6
