"""A reasoning model's answers (`--sim-reasoning-tokens`) behind a Qwen3-style template that drops earlier
reasoning (`--sim-chat-template drop-reasoning`), measured live through the runner (issue 9, item 3).

SGLang's tree holds prompt + answer (all but the last token) when a turn finishes. Turn t's prompt carries
turn t-1's answer; if the history the server tokenizes has the reasoning span removed (by its template or by
the client's `history: drop-reasoning`), turn t matches exactly turn t-1's prompt and stops where the
previous answer's `<think>` was. Earlier answers were already stripped when turn t-1 was rendered, so the
loss per turn is the previous answer only, and both client histories give the same prompts and the same hits.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from harness.capture import read_jsonl
from harness.spec import load_spec
from harness.sweep.attach import run_points
from harness.tokenizer import drop_reasoning
from tests.helpers.procs import SimProc
from tests.helpers.specs import TIMEOUTS, multi_turn, write_spec

pytestmark = pytest.mark.slow

REASONING = 32
ANSWER = 64  # max_tokens per turn: `<think>` + 32 words + `</think>` + 30 words of answer proper
SESSIONS, TURNS = 4, 4
FAST = ("--card-profile", "tiny-test", "--time-scale", "0.05", "--enable-cache-report")


def _spec(folder: Path, history: str) -> Path:
    wl = multi_turn(sessions=SESSIONS, turns=TURNS, system_prompt_tokens=32, question_tokens=8,
                    answer_tokens=ANSWER, history=history)  # fmt: skip
    return write_spec(folder, f"reasoning-{history}", wl, tokenizer="word", concurrency=1, seeds=[0],
                      timeouts=TIMEOUTS, file=f"{history}.yaml")  # fmt: skip


def _run(srv: SimProc, folder: Path, history: str) -> list[dict]:
    spec = load_spec(_spec(folder, history))
    cap = folder / f"cap-{srv.log_path.parent.name}-{history}"  # fresh: the runner skips points already ok
    rec = run_points(spec, base_url=srv.url, server_name="sim", node="n", capture_root=cap)[0]
    assert rec.status == "ok"
    rows, bad = read_jsonl(cap / "n" / spec.name / "sim" / "seed=0" / "requests.jsonl")
    assert bad == 0 and len(rows) == SESSIONS * TURNS and all(r["ok"] for r in rows)
    return rows


def _by_turn(rows: list[dict]) -> dict[tuple[int, int], dict]:
    return {(r["session"], r["turn"]): r for r in rows}


def _turn_rates(rows: list[dict]) -> dict[int, float]:
    """Hit rate per turn: cached / prompt tokens summed over the sessions."""
    out = {}
    for t in range(TURNS):
        sel = [r for r in rows if r["turn"] == t]
        out[t] = sum(r["cached_tokens"] or 0 for r in sel) / sum(r["prompt_tokens"] for r in sel)
    return out


@pytest.fixture
def sim(tmp_path):
    procs: list[SimProc] = []

    def start(*args: str) -> SimProc:
        d = tmp_path / f"sim{len(procs)}"
        d.mkdir()
        p = SimProc(d, *FAST, "--sim-reasoning-tokens", str(REASONING), *args)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


def test_template_drop_reasoning_unit():
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think> x y </think> b c"},
        {"role": "user", "content": "d"},
        {"role": "assistant", "content": "<think> z </think> e"},
    ]
    out = drop_reasoning(msgs)
    assert [m["content"] for m in out] == ["a", " b c", "d", "<think> z </think> e"]
    assert msgs[1]["content"] == "<think> x y </think> b c"  # the caller's messages are not changed
    msgs[1]["content"] = "<think> x </think> quoted </think>\n\nb c"  # the last </think> counts
    assert drop_reasoning(msgs)[1]["content"] == "b c"


def test_answers_carry_the_reasoning_span_and_flags_are_reported(sim):
    srv = sim()
    info = httpx.get(srv.url + "/get_server_info", timeout=10).json()
    assert info["sim_reasoning_tokens"] == REASONING and info["sim_chat_template"] == "verbatim"
    body = {"model": "m", "messages": [{"role": "user", "content": "baba"}], "max_tokens": 40}
    r = httpx.post(srv.url + "/v1/chat/completions", json={**body, "ignore_eos": True}, timeout=10).json()
    words = r["choices"][0]["message"]["content"].split()
    assert r["usage"]["completion_tokens"] == 40 == len(words)  # the span counts toward max_tokens
    assert words[0] == "<think>" and words[REASONING + 1] == "</think>" and "<think>" not in words[1:]
    short = httpx.post(srv.url + "/v1/chat/completions", json={**body, "max_tokens": 10}, timeout=10).json()
    assert short["usage"]["completion_tokens"] == 10 and short["choices"][0]["finish_reason"] == "length"
    assert "</think>" not in short["choices"][0]["message"]["content"]  # cut off while thinking


def test_reasoning_history_hit_rates_per_template(sim, tmp_path):
    drop_srv = sim("--sim-chat-template", "drop-reasoning")
    info = httpx.get(drop_srv.url + "/get_server_info", timeout=10).json()
    assert info["sim_chat_template"] == "drop-reasoning"
    dv = _run(drop_srv, tmp_path, "verbatim")
    dd = _run(drop_srv, tmp_path, "drop-reasoning")
    drop_srv.stop()
    keep_srv = sim()  # the verbatim template keeps the reasoning in the history
    kv = _run(keep_srv, tmp_path, "verbatim")
    kd = _run(keep_srv, tmp_path, "drop-reasoning")

    rates = {
        name: _turn_rates(rows)
        for name, rows in (("drop/verbatim", dv), ("drop/drop", dd), ("keep/verbatim", kv), ("keep/drop", kd))
    }
    print(json.dumps(rates, indent=1))
    for rows in (dv, dd, kv, kd):
        assert all(r["completion_tokens"] == ANSWER for r in rows)
    # Reasoning removed from the history anywhere: turn t matches turn t-1's prompt and nothing of its answer.
    for rows in (dv, dd, kd):
        turns = _by_turn(rows)
        for (s, t), r in turns.items():
            if t > 0:
                assert r["cached_tokens"] == turns[s, t - 1]["prompt_tokens"], (s, t)
    # The server renders the same prompts whether the client or the template drops the span.
    assert (
        [r["prompt_tokens"] for r in dv]
        == [r["prompt_tokens"] for r in dd]
        == [r["prompt_tokens"] for r in kd]
    )
    assert (
        [r["cached_tokens"] for r in dv]
        == [r["cached_tokens"] for r in dd]
        == [r["cached_tokens"] for r in kd]
    )
    # Reasoning kept: turn t matches turn t-1's prompt and its whole answer but the last token.
    turns = _by_turn(kv)
    for (s, t), r in turns.items():
        if t > 0:
            prev = turns[s, t - 1]
            assert r["cached_tokens"] == prev["prompt_tokens"] + prev["completion_tokens"] - 1, (s, t)
    # Turn 0 shares only the system prompt: the same in every run.
    assert rates["drop/verbatim"][0] == rates["keep/verbatim"][0]
    for t in range(1, TURNS):
        assert rates["drop/verbatim"][t] < rates["keep/verbatim"][t] - 0.1, t
    assert rates["drop/verbatim"][1] < 0.6 < 0.85 < rates["keep/verbatim"][1]
