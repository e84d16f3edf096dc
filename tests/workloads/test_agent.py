"""Agent sessions: each step resends its context plus a tool result; a sub-agent's prompt begins with the
parent's whole context at the fork, and the parent's next step takes the sub-agent's summary; on the sim,
hit rate per step depth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report.html_page import write_html
from harness.spec import parse_spec
from harness.workloads import PromptBuilder, build_schedule
from harness.workloads.prompts import Turnout
from tests.helpers.cli import run_bench
from tests.helpers.specs import SIM_FAST, TIMEOUTS, spec, write_yaml

WL = {
    "kind": "agent",
    "sessions": 2,
    "steps": 4,
    "system_prompt_tokens": 50,
    "task_tokens": 20,
    "tool_result_tokens": 30,
    "answer_tokens": 8,
    "subagents": {"at_steps": [1], "steps": 2, "task_tokens": 10, "summary_tokens": 12},
}


def test_the_plan_of_a_session_with_a_sub_agent() -> None:
    sched = build_schedule(parse_spec(spec("a", WL), "a.yaml"), None, 0)
    convs = list(sched.conversations)
    assert len(sched) == 2 * (4 + 2)
    turns = convs[0].turns
    # P0, P1, S0, S1, P2 (takes S1's summary), P3
    assert [r.lineage for r in turns] == [(), (0,), (0, 1), (0, 1, 2), (0, 1), (0, 1, 4)]
    assert [r.turn for r in turns] == [0, 1, 2, 3, 2, 3]  # the step depth
    assert [r.tool_from for r in turns] == [None, None, None, None, 3, None]
    assert [r.output_tokens for r in turns] == [8, 8, 8, 12, 8, 8]
    indices = [r.index for c in convs for r in c.turns]
    assert sorted(indices) == list(range(12)) and [r.index for r in turns] == [0, 2, 4, 6, 8, 10]


def test_prompts_extend_their_context_and_the_sub_agent_forks_from_the_parent() -> None:
    sched = build_schedule(parse_spec(spec("a", WL, api="openai-completions"), "a.yaml"), None, 0)
    conv = list(sched.conversations)[0]
    builder = PromptBuilder(sched, "openai-completions")
    history: list[Turnout] = []
    texts = []
    for k, r in enumerate(conv.turns):
        built = builder.build(conv, r, history)
        texts.append(built.payload)
        assert built.expected_tokens == len(built.payload.split())  # the word tokenizer counts exactly
        history.append(Turnout(answer=" ".join(f"a{k}w{i}" for i in range(r.output_tokens))))
    cut = texts[1].rindex("<|im_start|>assistant")  # the generation prompt
    assert texts[2].startswith(texts[1][:cut]) and "a1w0" in texts[2]  # S0: P1's context and answer
    assert texts[3].startswith(texts[2][: texts[2].rindex("<|im_start|>assistant")])
    assert texts[4].startswith(texts[2][: texts[2].index(conv.turns[2].question)])  # P2 shares up to the fork
    assert "a2w0" not in texts[4] and " ".join(f"a3w{i}" for i in range(12)) in texts[4]  # S1's summary only


@pytest.mark.slow
def test_an_agent_spec_on_the_sim_gives_hit_rate_by_step_depth(tmp_path: Path) -> None:
    server = {
        "name": "sim",
        "launch": "sim",
        "args": [*SIM_FAST, "--enable-cache-report", "--enable-metrics"],
    }
    raw = spec("agent", WL, concurrency=2, seeds=[0], timeouts=TIMEOUTS, servers=[server], think_time_s=0.01)
    r = run_bench(tmp_path, "--spec", str(write_yaml(tmp_path / "agent.yaml", raw)), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (point,) = json.loads((tmp_path / "summaries" / "n.json").read_text())["points"]
    m = point["median"]
    by_depth = m["hit_rate_usage_by_step_depth"]
    print("hit rate by step depth:", {k: round(v, 3) for k, v in by_depth.items()})
    assert set(by_depth) == {"0", "1", "2", "3"} and by_depth == m["hit_rate_usage_by_turn"]
    assert by_depth["0"] < 0.1 and all(by_depth[k] > 0.5 for k in "123")  # each step resends its context
    assert set(m["ttft_median_s_by_step_depth"]) == set(by_depth) == set(m["requests_by_step_depth"])
    assert all(v > 0 for v in m["ttft_p99_s_by_step_depth"].values())
    by_len = m["hit_rate_usage_by_length"]  # by context-length bucket: a step's prompt is its whole context
    assert len(by_len) >= 2 and set(m["ttft_p99_s_by_length"]) == set(by_len)
    assert (
        sum(m["requests_by_length"].values())
        == sum(m["requests_by_step_depth"].values())
        == point["median"]["ok"]
    )
    assert point["predicted_hit_rate"] == pytest.approx(point["measured_hit_rate"], abs=0.02)
    # the report names them for what they are: step depth, context length (markdown and HTML)
    md = (tmp_path / "summaries" / "n.md").read_text()
    assert "| whole-run hit rate | step depth 0 | step depth 1 | step depth 2 | step depth 3 |" in md
    assert "### By step depth" in md and "### By context length (tokens)" in md
    assert "turn 1" not in md and "By prompt length" not in md
    html = write_html(json.loads((tmp_path / "summaries" / "n.json").read_text()), tmp_path / "r.html")
    page = html.read_text()
    assert "By step depth" in page and "By context length (tokens)" in page and "step depth 0" in page
    assert "per step depth" in page and "turn (1 = first request" not in page
