"""Trace replay workloads (issue 14): Mooncake blocks, conversations, request logs, their bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.spec import load_spec
from harness.workloads import PromptBuilder, build_schedule
from harness.workloads.prompts import Turnout
from harness.workloads.traces import block_positions, bucket, mooncake_ideal
from tests.helpers import specs

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT / "tests" / "data" / "mooncake" / "conversation_trace.jsonl"


def write_spec(tmp: Path, workload: dict, **top) -> Path:
    wl = {"kind": "trace", **workload}
    top = {"api": "openai-completions", "model": "m", "workload": wl, **top}
    return specs.write_spec(tmp, "tr", file="spec.yaml", **top)


def schedule_of(tmp: Path, workload: dict, **top):
    spec = load_spec(write_spec(tmp, workload, **top))
    return spec, build_schedule(spec, None, 0)


def prompts(spec, sch) -> list:
    b = PromptBuilder(sch, spec.api)
    return [(c, r, b.build(c, r, [])) for c in sch.conversations for r in c.turns]


def mooncake_file(tmp: Path, lines: list) -> Path:
    p = tmp / "trace.jsonl"
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


# ------------------------------------------------------------------ mooncake blocks


def test_mooncake_blocks_share_exactly_where_hash_ids_do(tmp_path: Path) -> None:
    trace = mooncake_file(
        tmp_path,
        [
            {"timestamp": 0, "input_length": 1500, "output_length": 9, "hash_ids": [7, 8, 9]},
            {"timestamp": 5, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 10]},
            {"timestamp": 9, "input_length": 700, "output_length": 3, "hash_ids": [11, 12]},
        ],
    )
    spec, sch = schedule_of(tmp_path, {"path": str(trace), "format": "mooncake", "block_tokens": 64})
    (_, r0, p0), (_, r1, p1), (_, r2, p2) = prompts(spec, sch)
    w0, w1, w2 = (p.payload.split() for p in (p0, p1, p2))
    assert [len(w0), len(w1), len(w2)] == [math.ceil(n * 64 / 512) for n in (1500, 1100, 700)]
    assert [p.expected_tokens for p in (p0, p1, p2)] == [len(w0), len(w1), len(w2)]
    assert w0[:128] == w1[:128] and w0[128] != w1[128]  # ids 7, 8 shared; 9 vs 10 differ at their first token
    assert w2[0] != w0[0] and w2[64] != w0[64]
    assert [r0.output_tokens, r1.output_tokens] == [9, 3]
    assert [r.arrival for r in (r0, r1, r2)] == [0.0, 0.005, 0.009]  # honor is the default; ms → s
    assert [r.position for r in (r0, r1, r2)] == [0, 1, 0]


def test_block_ids_as_token_ids_differ_from_the_first_token(tmp_path: Path) -> None:
    trace = mooncake_file(
        tmp_path, [{"input_length": 1024, "hash_ids": [h, h + 1]} for h in range(0, 600, 2)]
    )
    spec, sch = schedule_of(
        tmp_path,
        {"path": str(trace), "block_tokens": 8, "timestamps": "ignore"},
        api="sglang-generate",
        tokenizer="server",
    )
    built = [p.payload for _, _, p in prompts(spec, sch)]
    assert all(isinstance(p, list) and len(p) == 16 for p in built)
    heads = [p[0] for p in built] + [p[8] for p in built]
    assert len(set(heads)) == len(heads)  # 600 distinct ids, 600 distinct first tokens
    again = prompts(spec, build_schedule(spec, None, 0))
    assert [p.payload for _, _, p in again] == built  # the same ids give the same tokens
    assert all(r.arrival is None for _, r, _ in again)


def test_speedup_and_slice(tmp_path: Path) -> None:
    trace = mooncake_file(
        tmp_path, [{"timestamp": 1000 * i, "input_length": 10, "hash_ids": [i]} for i in range(10)]
    )
    _, sch = schedule_of(
        tmp_path, {"path": str(trace), "start": 4, "limit": 3, "speedup": 2.0, "max_output_tokens": 1}
    )
    reqs = list(sch.requests())
    assert len(sch) == 3 and [r.index for r in reqs] == [0, 1, 2]
    assert [r.arrival for r in reqs] == [0.0, 0.5, 1.0]
    assert {r.output_tokens for r in reqs} == {1}


def test_shipped_trace_ideal_hit_rate_is_the_readme_figure() -> None:
    n, hit, total = mooncake_ideal(MOONCAKE, 0, None, 512)
    assert n == 12031
    assert round(100 * hit / total, 1) == 37.4
    n8, hit8, total8 = mooncake_ideal(MOONCAKE, 0, 400, 64, sent=set(range(0, 400, 2)))
    assert n8 == 200 and 0 < hit8 < total8


def test_positions_count_earlier_requests_through_the_shared_prefix() -> None:
    pos = block_positions(iter([(1, 2), (1, 3), (1, 2, 4), (5,), (1, 2, 4, 6)]))
    # (1,3) shares block 1 with one earlier; (1,2,4) shares (1,2) with one; (1,2,4,6) shares (1,2,4) with one
    assert list(pos) == [0, 1, 1, 0, 1]
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 7, 8)] == [0, 1, 2, 2, 4, 4, 8]


# ------------------------------------------------------------------ conversations and request logs


def test_sharegpt_conversations_recorded_history(tmp_path: Path) -> None:
    conv = tmp_path / "c.json"
    conv.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "hi there"},
                        {"from": "gpt", "value": "hello you"},
                        {"from": "human", "value": "more please"},
                    ]
                },
                {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why"}]},
            ]
        )
    )
    spec, sch = schedule_of(tmp_path, {"path": str(conv), "format": "conversations", "history": "recorded"})
    assert len(sch) == 3 and len(sch.conversations) == 2
    b = PromptBuilder(sch, "openai-completions")
    convs = list(sch.conversations)
    c0 = convs[0]
    assert c0.turns[0].output_tokens == 2  # the recorded answer's length
    # recorded: the file's answer goes into the history whatever the server said
    p = b.build(c0, c0.turns[1], [Turnout(answer="something else entirely")])
    assert "hello you" in p.payload and "something else" not in p.payload
    assert p.expected_tokens == len(p.payload.split())
    assert convs[1].system == "be brief" and convs[1].turns[0].index == 2


def test_request_log_formats_and_sessions(tmp_path: Path) -> None:
    log = mooncake_file(
        tmp_path,
        [
            {"timestamp": 1000, "prompt": "a b c", "max_tokens": 4, "session_id": "x"},
            {"timestamp": 1500, "messages": [{"role": "user", "content": "d e"}], "session_id": "x"},
            {"timestamp": 3000, "prompt": "f", "max_tokens": 2, "session_id": 7},
        ],
    )
    spec, sch = schedule_of(tmp_path, {"path": str(log), "format": "requests", "timestamp_unit": "ms"})
    rows = prompts(spec, sch)
    assert [r.arrival for _, r, _ in rows] == [0.0, 0.5, 2.0]
    assert [r.position for _, r, _ in rows] == [0, 1, 0]
    assert rows[0][2].payload == "a b c" and rows[0][2].expected_tokens == 3
    assert rows[1][2].payload.startswith("<|im_start|>user d e") and rows[1][2].expected_tokens == 5
    assert [r.output_tokens for _, r, _ in rows] == [4, 256, 2]


# ------------------------------------------------------------------ bad input: one line each


def _error(tmp_path: Path, workload: dict, **top) -> str:
    with pytest.raises(HarnessError) as e:
        schedule_of(tmp_path, workload, **top)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_bad_mooncake_input(tmp_path: Path) -> None:
    assert "file not found: nope.jsonl" in _error(tmp_path, {"path": "nope.jsonl"})
    trace = mooncake_file(tmp_path, [{"input_length": 600, "hash_ids": [1, 2]}, "{not json"])
    assert f"{trace}: line 2: not JSON" in _error(tmp_path, {"path": str(trace)})
    trace = mooncake_file(tmp_path, ["", {"input_length": 600, "hash_ids": [1, 2, 3]}])
    assert "line 2: hash_ids: 3 ids, but input_length 600 allows at most 2" in _error(
        tmp_path, {"path": str(trace)}
    )
    assert (
        "workload.format: expected one of mooncake, conversations, requests, bailian, agentic, got 'csv'"
        in _error(tmp_path, {"path": str(trace), "format": "csv"})
    )


def test_bad_request_logs(tmp_path: Path) -> None:
    log = mooncake_file(tmp_path, [{"timestamp": 1, "input_ids": [1, 2]}])
    assert "input_ids need api: sglang-generate" in _error(tmp_path, {"path": str(log), "format": "requests"})
    log = mooncake_file(tmp_path, [{"prompt": "x"}])
    assert "line 1: no timestamp" in _error(tmp_path, {"path": str(log), "format": "requests"})
    log = mooncake_file(tmp_path, [{"prompt": "x", "messages": []}])
    assert "exactly one of messages, prompt, input_ids" in _error(
        tmp_path, {"path": str(log), "format": "requests"}
    )


def test_prompt_check_counts_prompts_not_as_built_and_the_report_says_so() -> None:
    from types import SimpleNamespace

    from harness.report.predicted import prediction_table
    from harness.summarize.prediction import prompt_check

    rows = [
        {"expected_prompt_tokens": 10, "prompt_tokens": 10},
        {"expected_prompt_tokens": 10, "prompt_tokens": 11},
        {"expected_prompt_tokens": None, "prompt_tokens": 5},
    ]
    check = prompt_check([SimpleNamespace(requests=rows)])  # type: ignore[list-item]
    assert check == {"checked": 2, "differ": 1}
    point = {
        "experiment": "e",
        "server": "s",
        "sweep": {},
        "point_key": "default",
        "predicted_hit_rate": 0.10,
        "measured_hit_rate": 0.15,
        "ideal_hit_rate": 0.2,
        "prediction": {"diff_points": 5.0, "flag": True, "flag_points": 3.0},
        "prompt_check": check,
    }
    table = prediction_table([point])
    assert (
        "| s | default | 15.0% | 10.0% | +5.00 | 20.0% | ⚠ over 3 points; 1 of 2 prompts not as built |"
        in table
    )


def test_mooncake_blocks_as_text_round_trip_through_a_local_tokenizer(tmp_path: Path) -> None:
    """tokenizer: a tokenizer.json (trained here, as the real-server suite does): each block's text is
    made of whole-word tokens, so it encodes back to exactly the blocks' token count."""
    pytest.importorskip("tokenizers")
    from harness.realserver.model import train_tokenizer
    from harness.workloads.tokenizers import load_tokenizer

    tok_path = tmp_path / "tokenizer.json"
    train_tokenizer(4096, tok_path)
    lines = [{"input_length": 600 + 10 * i, "hash_ids": [0, i + 1]} for i in range(40)]
    trace = mooncake_file(tmp_path, lines)
    spec, sch = schedule_of(
        tmp_path,
        {"path": str(trace), "block_tokens": 64, "timestamps": "ignore"},
        tokenizer=str(tok_path),
    )
    tok = load_tokenizer(str(tok_path))
    built = prompts(spec, sch)
    for _, r, p in built:
        assert p.expected_tokens == r.question_tokens == len(tok.encode(p.payload))
    ids = [tok.encode(p.payload) for _, _, p in built]
    assert all(x[:64] == ids[0][:64] for x in ids)  # hash id 0: the same 64 tokens in every prompt
    assert len({x[64] for x in ids}) == len(ids)  # ids 1..40: different from their first token


def test_trace_sweeps_history_and_timestamps(tmp_path: Path) -> None:
    conv = tmp_path / "c.jsonl"
    conv.write_text(json.dumps({"messages": [{"role": "user", "content": "a b"}]}) + "\n")
    spec = load_spec(
        write_spec(
            tmp_path,
            {"path": str(conv), "format": "conversations"},
            sweep={"history": ["live", "recorded"], "timestamps": ["honor", "ignore"]},
        )
    )
    assert [(p.workload.history, p.workload.timestamps) for p in spec.points()] == [
        ("live", "honor"),
        ("live", "ignore"),
        ("recorded", "honor"),
        ("recorded", "ignore"),
    ]
    with pytest.raises(HarnessError, match="sweep.history\\[0\\]: expected one of live, recorded"):
        load_spec(
            write_spec(
                tmp_path, {"path": str(conv), "format": "conversations"}, sweep={"history": ["verbatim"]}
            )
        )
