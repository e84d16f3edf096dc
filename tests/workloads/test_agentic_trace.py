"""Agentic coding traces (tests/data/agentic: five kv-cache-tester conversations, one with two sub-agents):
the reader, each bad file one line naming the file, request and key, the closed-loop schedule, and a live
replay on the sim where no request goes before its previous answer plus its think time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.spec import parse_spec
from harness.workloads import build_schedule
from harness.workloads.agentic_trace import gaps, read_fleet
from tests.helpers.cli import run_bench
from tests.helpers.specs import SIM_FAST, TIMEOUTS, spec, write_yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "agentic"
SUB = DATA / "trace_0291.json"  # 20 requests, then... two sub-agents (5 and 7 requests) at entries 16, 17


def agentic_spec(path: Path = DATA, **over: Any) -> dict[str, Any]:
    wl = {"kind": "trace", "format": "agentic", "path": str(path), "block_tokens": 4, **over}
    return spec("agentic", wl, api="openai-completions")


def test_reader_flattens_subagents_in_place_with_local_ids() -> None:
    convs = read_fleet(DATA)
    assert [c.name for c in convs] == [f"trace_{n}" for n in ("0167", "0291", "0297", "0504", "0505")]
    sub = convs[1]
    assert sub.subagents == 2 and len(sub.requests) == 20 + 5 + 7
    assert [r.agent for r in sub.requests[15:30]] == [0] + [1] * 5 + [2] * 7 + [0, 0]
    assert [r.first_of_agent for r in sub.requests[16:23]] == [True, False, False, False, False, True, False]
    # a sub-agent's times are its own start plus its requests' offsets
    assert sub.requests[17].recorded_s == pytest.approx(1148.013 + 5.0)
    raw = json.loads(SUB.read_text())["requests"]
    assert sub.requests[0].input_tokens == raw[0]["in"] and len(sub.requests[0].hash_ids) == 279 + 1  # + tail
    # local scope: no block id of one conversation appears in another
    blocks = [{h for r in c.requests for h in r.hash_ids} for c in convs]
    assert all(not (blocks[i] & blocks[j]) for i in range(5) for j in range(i))
    # the file's own sharing is kept: every sub-agent request starts with the same sub-agent prefix
    firsts = {r.hash_ids[0] for r in sub.requests if r.agent}
    assert len(firsts) == 1


def test_shared_prefix_makes_tools_and_system_one_prompt() -> None:
    convs = read_fleet(DATA, shared_prefix=True)
    n = min(c.shared_blocks for c in convs)
    assert n == (9545 + 1212) // 64  # trace_0504's tools + system prompt, the shortest
    heads = {c.requests[0].hash_ids[:n] for c in convs}
    assert len(heads) == 1  # one tools + system prompt for the fleet
    # past its own tools + system prompt, each conversation's blocks are its own
    assert len({c.requests[0].hash_ids[c.shared_blocks] for c in convs}) == 5


def test_gaps_by_timing() -> None:
    (conv,) = read_fleet(SUB)
    raw = json.loads(SUB.read_text())["requests"]
    think = list(gaps(conv, "think"))
    assert think[0] is None and think[1] == raw[1]["think_time"] == 9.0
    assert (
        think[16] == 0.0 and think[17] == raw[16]["requests"][1]["think_time"]
    )  # a sub-agent starts at once
    assert think[28] == raw[18]["think_time"] == 108.0  # the parent after the group: its own think time
    recorded = list(gaps(conv, "recorded"))
    # the recording's parent resumed (1209 s) before the second sub-agent's last request (1180.553 + 54 s):
    # the recorded spacing clips at 0, the parent still waits for the group
    assert recorded[1] == 19.0 and recorded[28] == 0.0
    scaled = list(gaps(conv, "api-scaled", 0.5))
    assert scaled[1] == pytest.approx(10.02 * 0.5 + 9.0)


def test_schedule_is_closed_loop_sessions_scaled_by_block_tokens() -> None:
    s = parse_spec(agentic_spec(speedup=10), "a.yaml")
    assert s.workload.block_tokens == 4 and s.workload.timing == "think"
    sched = build_schedule(s, None, 0)
    convs = list(sched.conversations)
    assert len(convs) == 5 and len(sched) == 18 + 32 + 5 + 3 + 8
    first = convs[1].turns
    assert first[0].arrival == 0.0 and first[0].gap is None  # every agent starts at the run's start
    assert first[1].gap == pytest.approx(0.9) and first[1].arrival is None  # think 9 s / speedup 10
    assert first[0].question_tokens == -(-17869 * 4 // 64)
    assert sorted(r.index for r in sched.requests()) == list(range(len(sched)))
    for c in convs:  # a conversation's own indices only grow (the loadgen sends the lowest ready first)
        assert [r.index for r in c.turns] == sorted(r.index for r in c.turns)
    ignore = build_schedule(parse_spec(agentic_spec(timestamps="ignore"), "a.yaml"), None, 0)
    assert all(r.gap is None and r.arrival is None for r in ignore.requests())


def _mutate(tmp: Path, edit: Any) -> Path:
    data = json.loads(SUB.read_text())
    edit(data)
    p = tmp / "trace_bad.json"
    p.write_text(json.dumps(data))
    return p


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d["requests"][3].__setitem__("in", "many"), "request 3: in: expected a positive integer"),
        (lambda d: d["requests"][2]["hash_ids"].pop(), "request 2: hash_ids: 297 ids, but in 19109 has 298"),
        (lambda d: d["requests"][1].__setitem__("think_time", -1), "request 1: think_time: expected"),
        (lambda d: d["requests"][0].__setitem__("type", "x"), "request 0: type: expected s, n or subagent"),
        (lambda d: d["requests"][16]["requests"][2].pop("t"), "request 16.requests[2]: t: expected"),
        (
            lambda d: d["requests"][17].__setitem__("requests", []),
            "request 17: requests: expected a non-empty",
        ),
        (lambda d: d.__setitem__("block_size", 0), "file: block_size: expected a positive integer"),
        (lambda d: d["requests"][5]["hash_ids"].__setitem__(0, True), "request 5: hash_ids: expected a list"),
    ],
)
def test_bad_file_is_one_line_naming_file_request_and_key(tmp_path: Path, edit: Any, where: str) -> None:
    p = _mutate(tmp_path, edit)
    with pytest.raises(HarnessError) as e:
        read_fleet(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{p}: {where}") and "\n" not in msg, msg


def test_not_json_and_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{nope")
    with pytest.raises(HarnessError, match=r"a\.json: not JSON"):
        read_fleet(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HarnessError, match="no .json trace files"):
        read_fleet(empty)


@pytest.mark.slow
def test_live_closed_loop_respects_think_time(tmp_path: Path) -> None:
    """The Done-when: the folder replays live on the sim, closed loop; a request is never sent before its
    previous answer (the sub-agents' last, after a group) plus its think time / speedup."""
    server = {"name": "sim", "launch": "sim", "args": [*SIM_FAST, "--enable-cache-report"]}
    wl = {"speedup": 2000, "max_output_tokens": 8}
    raw = {**agentic_spec(**wl), "concurrency": 5, "timeouts": TIMEOUTS, "servers": [server]}
    r = run_bench(tmp_path, "--spec", str(write_yaml(tmp_path / "a.yaml", raw)), timeout=180)
    assert r.returncode == 0 or "flagged points (client-late" in r.stdout, r.stdout + r.stderr
    sched = build_schedule(parse_spec(agentic_spec(**wl), "a.yaml"), None, 0)
    cap = tmp_path / "capture" / "n" / "agentic" / "sim" / "seed=0" / "requests.jsonl"
    recs = {rec["index"]: rec for rec in map(json.loads, cap.read_text().splitlines())}
    assert len(recs) == len(sched) == 66 and all(rec["ok"] for rec in recs.values())
    checked = 0
    for conv in sched.conversations:
        for prev, req in zip(conv.turns, conv.turns[1:], strict=False):
            a, b = recs[prev.index], recs[req.index]
            assert b["sent_mono"] >= a["done_mono"] + (req.gap or 0.0) - 1e-6, (req.index, req.gap)
            checked += 1
    assert checked == 66 - 5
    cached = sum(rec["cached_tokens"] or 0 for rec in recs.values())
    assert cached > 0.5 * sum(rec["prompt_tokens"] for rec in recs.values())  # agents reuse their context


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"timing": "fast"}, "workload.timing: expected one of think, recorded, api-scaled, got 'fast'"),
        ({"shared_prefix": "yes"}, "workload.shared_prefix: expected true or false, got 'yes'"),
        ({"api_time_scale": 0}, "workload.api_time_scale"),
        ({"format": "mooncake"}, "workload.path: file not found"),  # a folder is an agentic trace's only
    ],
)
def test_spec_keys_checked(over: dict[str, Any], message: str) -> None:
    with pytest.raises(HarnessError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(agentic_spec(**over), "a.yaml")


def test_start_past_the_folder_names_the_key() -> None:
    with pytest.raises(HarnessError, match="workload.start.*no conversations from conversation 9 on"):
        build_schedule(parse_spec(agentic_spec(start=9), "a.yaml"), None, 0)


def test_global_scope_files_share_their_ids(tmp_path: Path) -> None:
    data = json.loads((DATA / "trace_0504.json").read_text())
    for name, scope in (("a", "global"), ("b", "global"), ("c", "local")):
        (tmp_path / f"{name}.json").write_text(json.dumps({**data, "hash_id_scope": scope}))
    a, b, c = read_fleet(tmp_path)
    full = len(a.requests[0].hash_ids) - 1  # the tail's id is each request's own
    assert a.requests[0].hash_ids[:full] == b.requests[0].hash_ids[:full]
    assert not set(a.requests[0].hash_ids) & set(c.requests[0].hash_ids)
    (tmp_path / "d.json").write_text(json.dumps({**data, "hash_id_scope": "per_context"}))
    with pytest.raises(HarnessError, match=r"d\.json: file: hash_id_scope: expected local or global"):
        read_fleet(tmp_path)


def test_shared_prefix_is_read_off_the_first_request_only(tmp_path: Path) -> None:
    data = json.loads((DATA / "trace_0504.json").read_text())
    data["requests"][1]["hash_ids"][0] = 99_999  # a later request whose history was rewritten at block 0
    (tmp_path / "a.json").write_text(json.dumps(data))
    (conv,) = read_fleet(tmp_path, shared_prefix=True)
    first, rewritten, last = (r.hash_ids for r in conv.requests)
    assert first[0] == last[0] < 0  # the shared tools + system block
    assert rewritten[0] > 0 and rewritten[1:10] == first[1:10]  # its own id there, the rest still shared
