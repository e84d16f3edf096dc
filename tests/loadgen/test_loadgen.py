"""The load generator against a real server: exact concurrency, session order, faults, arrivals, cancel."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.capture import read_jsonl
from harness.loadgen.run import RunIds, run_schedule
from harness.spec import Timeouts, parse_spec
from harness.workloads import build_schedule
from harness.workloads.arrivals import arrival_offsets
from harness.workloads.schedule import Conversation, Request, Schedule
from tests.helpers.loadrun import answer_facts
from tests.helpers.loadrun import run_sync as run


def spec(api="openai-chat", **wl):
    w = {
        "kind": "shared-prefix",
        "groups": 6,
        "prompts_per_group": 5,
        "system_prompt_tokens": 20,
        "question_tokens": 4,
        "output_tokens": 4,
        **wl,
    }
    return parse_spec({"name": "t", "model": "m", "api": api, "workload": w})


def overlap_max(rows) -> int:
    edges = sorted(
        [(r["sent_mono"], 1) for r in rows] + [(r["done_mono"], -1) for r in rows], key=lambda e: (e[0], e[1])
    )
    cur = best = 0
    for _, d in edges:
        cur += d
        best = max(best, cur)
    return best


@pytest.mark.slow
def test_concurrency_cap_exact(fake_server_factory, tmp_path):
    srv = fake_server_factory("--ttft-ms", "30", "--itl-ms", "5")
    s = build_schedule(spec(), None, 0)
    res = run(s, srv.url, tmp_path / "r.jsonl", concurrency=5)
    rows, bad = read_jsonl(tmp_path / "r.jsonl")
    assert bad == 0 and len(rows) == 30 and res.ok == 30
    assert res.max_in_flight == 5
    assert srv.stats()["max_in_flight"] == 5  # reached, never exceeded, as the server saw it
    assert overlap_max(rows) <= 5
    assert sorted(r["index"] for r in rows) == list(range(30))
    r0 = rows[0]
    assert r0["experiment"] == "t" and r0["server"] == "fake" and r0["point"] == "p"
    assert r0["prompt_sha"] and r0["answer"] and r0["expected_prompt_tokens"] == r0["prompt_tokens"]


@pytest.mark.slow
def test_multi_turn_order_and_history(fake_server_factory, tmp_path):
    srv = fake_server_factory("--ttft-ms", "5", "--itl-ms", "1", "--record-prompts")
    sp = parse_spec(
        {
            "name": "t",
            "model": "m",
            "workload": {
                "kind": "multi-turn",
                "sessions": 3,
                "turns": 4,
                "system_prompt_tokens": 10,
                "question_tokens": 3,
                "answer_tokens": 3,
            },
        }
    )
    s = build_schedule(sp, None, 0)
    res = run(s, srv.url, tmp_path / "r.jsonl", concurrency=8)
    assert res.ok == 12 and res.max_in_flight <= 3  # one turn per session at a time
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    prompts = srv.stats()["prompts"]
    for sess in range(3):
        turns = sorted((r for r in rows if r["session"] == sess), key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == [0, 1, 2, 3]
        for prev, cur in zip(turns, turns[1:], strict=False):
            assert cur["sent_mono"] >= prev["done_mono"]  # strictly after the previous turn finished
            # the server received a prompt holding the previous answer and every earlier question
            got = [p for p in prompts if prev["answer"] in p]
            assert got, f"answer {prev['answer']!r} never resent"
            q_prev = s.conversations[sess].turns[prev["turn"]].question
            assert any(q_prev in p and prev["answer"] in p for p in prompts)
            assert cur["expected_prompt_tokens"] == cur["prompt_tokens"]
    # cached tokens grow with history: the server saw the earlier turns as a prefix
    assert all(r["cached_tokens"] > 0 for r in rows if r["turn"] > 0)


def _fault_schedule(markers: list[str | None]) -> Schedule:
    convs = []
    for i, m in enumerate(markers):
        q = f"question {i}" + (f" {m}" if m else "")
        req = Request(
            index=i,
            conversation=i,
            turn=0,
            position=0,
            question=q,
            question_tokens=len(q.split()),
            output_tokens=4,
            group=i,
        )
        convs.append(Conversation(id=i, system=f"system {i}", system_tokens=2, turns=[req], group=i))
    return Schedule(kind="shared-prefix", seed=0, tokenizer="word", conversations=convs)


@pytest.mark.slow
def test_faults_recorded_while_others_complete(fake_server_factory, tmp_path):
    srv = fake_server_factory("--itl-ms", "2")
    markers = [None, "FAULT_500", None, "FAULT_MALFORMED", None, "FAULT_DROP", None, None]
    res = run(_fault_schedule(markers), srv.url, tmp_path / "r.jsonl", concurrency=3)
    rows, bad = read_jsonl(tmp_path / "r.jsonl")
    assert bad == 0 and len(rows) == 8
    kinds = {r["index"]: r["error_kind"] for r in rows}
    assert kinds[1] == "http" and kinds[3] == "protocol" and kinds[5] == "disconnect"
    assert all(kinds[i] is None for i in (0, 2, 4, 6, 7))
    assert res.ok == 5 and res.failed == 3 and dict(res.errors) == {"http": 1, "protocol": 1, "disconnect": 1}


def test_refused_connection_every_request_recorded(free_port, tmp_path):
    res = run(
        build_schedule(spec(groups=2, prompts_per_group=2), None, 0),
        f"http://127.0.0.1:{free_port}",
        tmp_path / "r.jsonl",
        timeouts=Timeouts(connect=2),
    )
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert res.failed == 4 and {r["error_kind"] for r in rows} == {"connect"}


@pytest.mark.slow
def test_poisson_arrivals_on_absolute_times(fake_server_factory, tmp_path):
    srv = fake_server_factory("--itl-ms", "1")
    offs = arrival_offsets(40, 50.0, 7)
    assert offs == arrival_offsets(40, 50.0, 7) and offs != arrival_offsets(40, 50.0, 8)
    assert offs[-1] / 39 == pytest.approx(1 / 50, rel=0.5)
    s = build_schedule(spec(groups=8, prompts_per_group=5), None, 7)
    res = run(s, srv.url, tmp_path / "r.jsonl", concurrency=16, request_rate=50.0)
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert res.ok == 40
    sched = sorted(r["scheduled_mono"] for r in rows)
    t0 = res.start_mono
    for got, want in zip(sched, offs, strict=True):
        assert got - t0 == pytest.approx(want, abs=0.01)
    lag = [r["sent_mono"] - r["scheduled_mono"] for r in rows]
    assert max(lag) < 0.05  # sent on time, well under the cap


@pytest.mark.slow
def test_cancel_records_in_flight_and_keeps_file_valid(fake_server_factory, tmp_path):
    srv = fake_server_factory("--ttft-ms", "10", "--itl-ms", "100")
    s = build_schedule(spec(), None, 0)
    out = tmp_path / "r.jsonl"

    async def main():
        t = asyncio.ensure_future(
            run_schedule(
                s,
                base_url=srv.url,
                api="openai-chat",
                model="m",
                concurrency=4,
                out_path=out,
                ids=RunIds("t", "f", "p", 0),
            )
        )
        await asyncio.sleep(0.6)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    lines = out.read_text().splitlines()
    rows = [json.loads(x) for x in lines]  # every line is complete JSON
    cancelled = [r for r in rows if r["error_kind"] == "cancelled"]
    assert len(cancelled) == 4 and len(rows) < 30
    assert all(r["done_mono"] and r["first_byte_mono"] for r in cancelled)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["openai-completions", "sglang-generate"])
def test_other_apis_through_loadgen(fake_server, tmp_path, api):
    s = build_schedule(spec(api=api, groups=2, prompts_per_group=3), None, 1)
    res = run(s, fake_server.url, tmp_path / "r.jsonl", api=api, concurrency=3)
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert res.ok == 6 and all(r["api"] == api and r["completion_tokens"] == 4 for r in rows)


@pytest.mark.slow
def test_both_engines_record_the_same_facts(fake_server_factory, tmp_path):
    s = build_schedule(spec(groups=3, prompts_per_group=2), None, 3)
    got = {}
    for engine in ("http1", "aiohttp"):  # a fresh server each, one request at a time: same answers
        srv = fake_server_factory("--itl-ms", "1")
        res = run(s, srv.url, tmp_path / f"{engine}.jsonl", concurrency=1, engine=engine)
        rows, bad = read_jsonl(tmp_path / f"{engine}.jsonl")
        assert res.ok == 6 and bad == 0
        got[engine] = answer_facts(rows)
        assert all(r["first_byte_mono"] <= r["first_token_mono"] <= r["done_mono"] for r in rows)
    assert got["http1"] == got["aiohttp"]


@pytest.mark.slow
def test_unknown_engine_is_one_clear_error(fake_server, tmp_path, monkeypatch):
    from harness.errors import HarnessError

    monkeypatch.setenv("HARNESS_HTTP_ENGINE", "curl")
    with pytest.raises(HarnessError, match="HARNESS_HTTP_ENGINE"):
        run(
            build_schedule(spec(groups=1, prompts_per_group=1), None, 0),
            fake_server.url,
            tmp_path / "r.jsonl",
        )


def test_record_writer_hands_each_record_to_the_os_at_once(tmp_path):
    """kill -9 may only lose requests in flight: a written record is in the file before write() returns."""
    from harness.capture.files import JsonlWriter
    from harness.capture.records import RequestRecord

    out = tmp_path / "r.jsonl"
    w = JsonlWriter(out)
    w.write(RequestRecord(experiment="e", server="s", point="p", seed=0, index=0, token_mono=[1.5, 2.25]))
    assert len(out.read_text().splitlines()) == 1  # no buffering, no timer
    w.write(RequestRecord(experiment="e", server="s", point="p", seed=0, index=1))
    assert len(out.read_text().splitlines()) == 2
    w.close()
    w.close()  # idempotent
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1] and rows[0]["token_mono"] == [1.5, 2.25]


@pytest.mark.slow
def test_interrupt_raised_inside_a_worker_stops_cleanly(fake_server_factory, tmp_path, monkeypatch, caplog):
    """A signal handler's KeyboardInterrupt can land in a worker: records stay whole, no stray traceback."""
    import harness.loadgen.run as lg

    srv = fake_server_factory("--ttft-ms", "5", "--itl-ms", "20")
    real, calls = lg.stream_request, []

    async def flaky(*a, **kw):
        calls.append(1)
        if len(calls) == 9:
            raise KeyboardInterrupt("SIGTERM")
        return await real(*a, **kw)

    monkeypatch.setattr(lg, "stream_request", flaky)
    out = tmp_path / "r.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run(build_schedule(spec(), None, 0), srv.url, out, concurrency=4)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert 4 <= len(rows) < 30 and any(r["error_kind"] == "cancelled" for r in rows)
    assert "never retrieved" not in caplog.text
