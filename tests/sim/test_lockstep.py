"""The live sim's virtual clock: wall-clock jitter must not change what happens in virtual time.

A closed-loop client with random wall delays drives the live engine (in process, and over HTTP to a
real serve-sim); with the lockstep header every request's cached tokens and virtual stamps equal the
virtual-time replay's (`harness.sim.simulate.simulate` through what-if's closed loop).
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from harness.protocol.lockstep import BadHint, ClientHint, parse_hint
from harness.sim.engine import Engine, SimRequest
from harness.sim.live import LiveEngine, Pace, overhead_line
from harness.sim.lockstep import Lockstep
from harness.sim.simulate import simulate
from harness.whatif.inputs import Trace, TraceRequest, read_spec
from harness.whatif.replay import Config, closed_loop, engine_config
from harness.workloads.arrivals import arrival_offsets
from tests.helpers.specs import TIMEOUTS, multi_turn, shared_prefix, write_spec

Send = Callable[[TraceRequest, ClientHint], Awaitable[dict]]


def _spec(tmp_path: Path, kind: str, concurrency: int) -> Path:
    workload = (
        multi_turn(sessions=6, turns=4, system_prompt_tokens=40, question_tokens=8, answer_tokens=16)
        if kind == "multi-turn"
        else shared_prefix(groups=5, system_prompt_tokens=120, question_tokens=16, output_tokens=12)
    )
    return write_spec(tmp_path, f"lockstep-{kind}", workload, tokenizer="word", concurrency=concurrency, seeds=[0],
                      timeouts=TIMEOUTS, file=f"{kind}.yaml")  # fmt: skip


async def drive(trace: Trace, concurrency: int, send: Send, wall_per_s: float = 0.0) -> dict[int, dict]:
    """The load generator's loop (harness.loadgen): `concurrency` workers, each taking the ready request
    with the lowest schedule index, a session's next turn ready when its turn finished; with the
    trace's request rate, a worker first claims the next arrival and waits for it (its offset x
    `wall_per_s` wall seconds after the start: any wall pace, the sim places it at its offset)."""
    convs: dict[int, list[int]] = {}
    for i, r in enumerate(trace.requests):
        convs.setdefault(r.conversation if r.conversation is not None else -1 - i, []).append(i)
    nxt = dict.fromkeys(convs, 0)
    ready = [(trace.requests[t[0]].index, cid) for cid, t in convs.items()]
    heapq.heapify(ready)
    changed = asyncio.Event()
    state = {"taken": 0, "seq": 0, "followed": 0, "arrival": 0}
    run = f"{random.getrandbits(32):08x}"
    out: dict[int, dict] = {}
    total = len(trace.requests)
    offsets = arrival_offsets(total, trace.request_rate, trace.seed) if trace.request_rate else None
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def worker() -> None:
        while True:
            k = -1
            if offsets is not None:
                k = state["arrival"]
                if k >= total:
                    return
                state["arrival"] += 1
                await asyncio.sleep(max(0.0, t0 + offsets[k] * wall_per_s - loop.time()))
            while not ready:
                if state["taken"] >= len(trace.requests):
                    return
                changed.clear()
                await changed.wait()
            _, cid = heapq.heappop(ready)
            state["taken"] += 1
            state["seq"] += 1
            i = convs[cid][nxt[cid]]
            nxt[cid] += 1
            more = nxt[cid] < len(convs[cid])
            r = trace.requests[i]
            hint = ClientHint(
                concurrency, state["seq"], len(ready), state["followed"], follow=more, index=r.index, run=run,
                offset=offsets[k] if offsets else None,
                next=offsets[k + 1] if offsets and k + 1 < total else None,
            )  # fmt: skip
            out[i] = await send(r, hint)
            if more:
                heapq.heappush(ready, (trace.requests[convs[cid][nxt[cid]]].index, cid))
                state["followed"] += 1
            changed.set()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def virtual(trace: Trace, cfg: Config, card: str) -> dict[int, dict]:
    first, on_finish = closed_loop(trace)
    done = simulate(first, engine_config(cfg, card), on_finish=on_finish)
    return {int(d.rid): _stamps(d) for d in done}


def _stamps(req: SimRequest) -> dict:
    return {
        "cached": req.cached_tokens,
        "arrival": req.arrival,
        "first_token": req.first_token_time,
        "finish": req.finish_time,
    }


def _close(a: dict[int, dict], b: dict[int, dict]) -> list[str]:
    """Requests whose cached tokens or stamps differ (stamps to a nanosecond: the same float sums)."""
    bad = []
    for i in sorted(set(a) | set(b)):
        x, y = a.get(i), b.get(i)
        if x is None or y is None or x["cached"] != y["cached"]:
            bad.append(f"{i}: {x} != {y}")
            continue
        for k in ("arrival", "first_token", "finish"):
            if abs((x[k] or 0) - (y[k] or 0)) > 1e-9:
                bad.append(f"{i}.{k}: {x[k]} != {y[k]}")
    return bad


# --- the header and the bookkeeping ----------------------------------------------------------------
def test_hint_round_trip_and_bad_values() -> None:
    h = ClientHint(8, 3, 20, 2, follow=True, index=7, offset=0.5, next=0.75, run="a1")
    assert parse_hint(h.header()) == h
    # the exact text (the sim and older servers read it; issue 29 reworded its formatting only)
    assert (
        h.header() == "run=a1;concurrency=8;seq=3;ready=20;followed=2;follow=1;index=7;offset=0.5;next=0.75"
    )
    assert ClientHint(4, 1, 0).header() == "concurrency=4;seq=1;ready=0;followed=0;follow=0"
    assert parse_hint(None) is None and parse_hint("  ") is None
    assert parse_hint("concurrency=2;seq=1") == ClientHint(2, 1, 0)
    for bad, word in (("concurrency=2", "missing"), ("seq=x;concurrency=1", "not a number"),
                      ("concurrency=0;seq=1", ">= 1"), ("concurrency=1;seq=1;speed=3", "bad field")):  # fmt: skip
        with pytest.raises(BadHint, match=word):
            parse_hint(bad)


def test_lockstep_owes_replacements_closed_loop() -> None:
    ls = Lockstep()
    assert ls.owed(0.0) == 0  # no lockstep client: never hold
    ls.arrive(ClientHint(3, 2, 5, run="r"), 0.0)  # seq 2 overtook seq 1 on the wire
    assert ls.owed(0.0) == 2  # seq 1 on the wire, one more free slot (five ready)
    ls.arrive(ClientHint(3, 1, 6, run="r"), 0.0)  # not a new run: same name
    ls.arrive(ClientHint(3, 3, 3, run="r"), 0.0)  # the latest send knows best
    r = ls.loop("r")
    assert (r.in_flight, r.ready, ls.owed(0.0)) == (3, 3, 0)
    ls.finish("r", follow=False, at=1.0)
    assert ls.owed(1.0) == 1
    ls.give_up(1.0)
    assert ls.owed(1.0) == 0 and ls.timeouts == 1
    ls.finish("r", follow=False, at=1.0)  # the loop changed: owe again
    assert ls.owed(1.0) == 2
    ls.arrive(ClientHint(3, 4, 0, run="r"), 1.0)
    ls.arrive(ClientHint(3, 5, 0, run="r"), 1.0)
    ls.finish("r", follow=False, at=1.0)
    assert ls.owed(2.0) == 0  # nothing ready: a session waiting on its own turn is not owed
    ls.finish("r", follow=True, at=2.0)
    assert ls.owed(2.0) == 1  # a finished turn makes its session's next turn ready
    ls.finish("r", follow=True, at=2.0)
    assert ls.owed(2.0) == 2  # two finishes, two follow-ups: owed both
    ls.arrive(ClientHint(3, 6, 0, followed=1, run="r"), 2.0)  # the client has seen one finish so far
    assert ls.owed(2.0) == 1  # ... the other's follow-up is still owed
    ls.arrive(ClientHint(2, 1, 1, run="s"), 3.0)  # another loop (a second worker process) beside it
    sl = ls.loop("s")
    assert (sl.in_flight, sl.ready, sl.owed(3.0)) == (1, 1, 1)
    assert ls.owed(3.0) == 2  # both loops owe one; neither reset the other
    ls.arrive(ClientHint(3, 7, 0, followed=2, run="r"), 3.0)
    ls.arrive(ClientHint(2, 2, 0, run="s"), 3.0)
    assert ls.owed(3.0) == 0 and r.in_flight == 2 and sl.in_flight == 2
    ls.finish("s", follow=False, at=4.0)
    ls.finish("s", follow=False, at=4.0)
    ls.arrive(ClientHint(2, 1, 1, run="t"), 5.0)  # a new run: finished loops are forgotten
    assert set(ls.loops) == {"r", "t"}


def test_lockstep_open_loop_waits_for_due_arrivals() -> None:
    ls = Lockstep()
    assert ls.arrive(ClientHint(4, 1, 9, offset=0.0, next=2.0), 10.0) == 10.0
    assert ls.owed(11.0) == 0  # the next arrival is due at 12.0
    assert ls.owed(12.0) == 1
    assert ls.arrive(ClientHint(4, 2, 8, offset=2.0, next=5.0), 12.5) == 12.0  # landed late: its schedule
    assert ls.arrive(ClientHint(4, 3, 7, offset=5.0, next=6.0), 13.0) == 15.0  # early: at its schedule
    assert ls.arrive(ClientHint(4, 4, 6, offset=6.0, next=7.0), 16.0) == 16.0
    ls.finish("", False, at=17.5)  # every slot was taken: the next arrival waited for this one
    assert ls.arrive(ClientHint(4, 5, 5, offset=7.0, next=9.0), 17.5) == 17.5


def test_overhead_line_says_what_and_why() -> None:
    p = Pace(forwards=10, paced_s=0.010, wall_s=0.013, held_s=0.002, modelled_s=0.5)
    assert p.fraction() == pytest.approx(0.3)
    line = overhead_line(p, 0.02, 1)
    assert "overhead 30.0%" in line and "--time-scale 0.02" in line and "timeouts: 1" in line


def test_lockstep_wait_flag_is_validated(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.sim.args import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--sim-lockstep-wait", "-1"])
    assert e.value.code == 2
    assert "--sim-lockstep-wait: must be >= 0, got -1.0" in capsys.readouterr().err


# --- in process: the live engine under wall-clock jitter ----------------------------------------------
async def _live_in_process(
    trace: Trace,
    cfg: Config,
    card: str,
    concurrency: int,
    *,
    jitter_s: float,
    hold_wait_s: float,
    wall_per_s: float = 0.0,
    first_late_s: float = 0.0,
) -> dict[int, dict]:
    rng = random.Random(7)
    live = LiveEngine(
        Engine(engine_config(cfg, card)),
        time_scale=0.0002,
        hold_wait_s=hold_wait_s,
        log_info=lambda _s: None,
        log_warning=print,
    )
    task = asyncio.create_task(live.run())

    async def send(r: TraceRequest, hint: ClientHint) -> dict:
        await asyncio.sleep(rng.uniform(0, jitter_s))  # the client's own wall-clock work before sending
        if r.index == 0:
            await asyncio.sleep(first_late_s)  # the run's first send, overtaken by the next ones
        req = SimRequest(rid=str(r.index), input_ids=list(r.key), output_ids=list(r.output_key))
        done = asyncio.Event()
        req.on_event = lambda q: done.set() if q.finished else None
        live.submit(req, hint)
        await done.wait()
        await asyncio.sleep(rng.uniform(0, jitter_s))  # ... and after the answer
        return _stamps(req)

    try:
        return await drive(trace, concurrency, send, wall_per_s)
    finally:
        task.cancel()


@pytest.mark.parametrize(("kind", "pool"), [("multi-turn", 600), ("shared-prefix", 500)])
def test_live_engine_matches_virtual_time_under_jitter(tmp_path: Path, kind: str, pool: int) -> None:
    """Random wall delays of up to 3 ms (tens of forwards at this time scale) between a finish and the
    next send: with lockstep every request's hits and stamps equal the virtual-time replay's."""
    trace = read_spec(_spec(tmp_path, kind, 4))
    cfg = Config("lru", pool)
    want = virtual(trace, cfg, "tiny-test")
    got = asyncio.run(_live_in_process(trace, cfg, "tiny-test", 4, jitter_s=0.003, hold_wait_s=5.0))
    assert _close(got, want) == []
    hits = sum(v["cached"] for v in want.values())
    assert 0 < hits < sum(r.tokens for r in trace.requests)  # the pool bound: eviction decided hits


def test_open_loop_arrivals_land_at_their_scheduled_virtual_time(tmp_path: Path) -> None:
    """With a request rate the client sends on its own wall schedule (here 1/50 of the modelled
    offsets, plus jitter); the sim places each arrival at its offset in virtual time and holds its
    clock for arrivals it has reached, so the result equals the virtual-time replay's."""
    import dataclasses

    trace = dataclasses.replace(read_spec(_spec(tmp_path, "shared-prefix", 4)), request_rate=40.0)
    cfg = Config("lru", 500)
    want = virtual(trace, cfg, "tiny-test")
    assert len({round(v["arrival"], 9) for v in want.values()}) > len(want) // 2  # arrivals spread out
    got = asyncio.run(
        _live_in_process(trace, cfg, "tiny-test", 4, jitter_s=0.002, hold_wait_s=5.0, wall_per_s=0.02)
    )
    assert _close(got, want) == []


def test_an_overtaken_first_send_still_starts_the_run(tmp_path: Path) -> None:
    """The run's first request lands after the next three (its send lost the race to a connect): the
    run still starts at its offset 0, the others at theirs, as in the virtual-time replay (the first to
    land once anchored the run, and every stamp sat one arrival gap early)."""
    import dataclasses

    trace = dataclasses.replace(read_spec(_spec(tmp_path, "shared-prefix", 4)), request_rate=40.0)
    cfg = Config("lru", 500)
    want = virtual(trace, cfg, "tiny-test")
    got = asyncio.run(
        _live_in_process(trace, cfg, "tiny-test", 4, jitter_s=0.0, hold_wait_s=5.0, first_late_s=0.005)
    )
    assert min(got, key=lambda i: got[i]["arrival"]) == 0 and got[0]["arrival"] == want[0]["arrival"]
    assert _close(got, want) == []


def test_lockstep_rebases_a_run_whose_first_send_was_overtaken() -> None:
    ls = Lockstep()
    assert ls.arrive(ClientHint(4, 2, 9, offset=0.5, next=0.7, run="r"), 10.0) == 10.0  # seq 2 landed first
    assert ls.rebase(ClientHint(4, 1, 9, offset=0.0, next=0.5, run="r"), 10.0) == 0.5
    assert ls.arrive(ClientHint(4, 1, 9, offset=0.0, next=0.5, run="r"), 10.0) == 10.0
    assert ls.arrive(ClientHint(4, 3, 8, offset=0.7, next=0.9, run="r"), 10.0) == 10.7
    assert ls.rebase(ClientHint(4, 4, 7, offset=0.9, next=1.0, run="r"), 10.0) == 0.0  # in order: nothing
    assert ls.rebase(ClientHint(4, 5, 7, offset=0.0, run="r"), 10.2) == 0.0  # the clock moved: too late


def test_without_lockstep_jitter_leaks_into_virtual_time(tmp_path: Path) -> None:
    """The control: with the header ignored (--sim-lockstep-wait 0), the same jitter moves arrivals."""
    trace = read_spec(_spec(tmp_path, "shared-prefix", 4))
    cfg = Config("lru", 500)
    want = virtual(trace, cfg, "tiny-test")
    got = asyncio.run(_live_in_process(trace, cfg, "tiny-test", 4, jitter_s=0.003, hold_wait_s=0.0))
    assert len(_close(got, want)) > len(trace.requests) // 4


# --- over HTTP: a real serve-sim, with and without a CPU-bound process beside it -----------------------
async def _live_http(url: str, trace: Trace, concurrency: int) -> dict[int, dict]:
    import aiohttp

    from harness.protocol.lockstep import HEADER

    async with aiohttp.ClientSession() as session:

        async def send(r: TraceRequest, hint: ClientHint) -> dict:
            body = {
                "input_ids": list(r.key),
                "sampling_params": {"max_new_tokens": len(r.output_key), "ignore_eos": True},
            }
            async with session.post(url + "/generate", json=body, headers={HEADER: hint.header()}) as resp:
                meta = (await resp.json())["meta_info"]
            st = meta["sim_time"]
            return {"cached": meta["cached_tokens"], "arrival": st["arrival_s"],
                    "first_token": st["first_token_s"], "finish": st["finish_s"]}  # fmt: skip

        return await drive(trace, concurrency, send)


@pytest.mark.slow
@pytest.mark.parametrize("hog", [False, True], ids=["quiet", "cpu-hog"])
def test_serve_sim_matches_virtual_time_over_http(tmp_path: Path, hog: bool) -> None:
    """A real serve-sim at --time-scale 0.02 (each wall ms of HTTP work would be 50 modelled ms without
    the virtual clock), driven over HTTP with the lockstep header, optionally beside a CPU-bound
    process: every request's hits and virtual stamps equal the virtual-time replay's."""
    import subprocess
    import sys

    from tests.helpers.procs import SimProc

    trace = read_spec(_spec(tmp_path, "multi-turn", 4))
    cfg = Config("lru", 600)
    want = virtual(trace, cfg, "tiny-test")
    burner = None
    if hog:
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    srv = SimProc(
        tmp_path, "--card-profile", "tiny-test", "--time-scale", "0.02", "--max-total-tokens", "600",
        "--sim-lockstep-wait", "5",
    )  # fmt: skip
    try:
        got = asyncio.run(_live_http(srv.url, trace, 4))
    finally:
        srv.stop()
        if burner is not None:
            burner.kill()
            burner.wait(5)
    bad = _close(got, want)
    assert bad == [], bad[:5]
    log = srv.log()
    assert log.count("Sim request finished, rid: ") == len(trace.requests)
    assert "lockstep: the client owed" not in log


@pytest.mark.slow
def test_dropped_streams_do_not_stall_the_lockstep(tmp_path: Path) -> None:
    """A stream the sim drops half-way (--fault-drop) reached the engine: the load generator counts its
    follow-up as seen though it skips the session, so the clock never waits for a turn that will not
    come (each such wait would be a lockstep timeout, and a wall-clock-dependent result)."""
    from harness.capture import read_jsonl
    from harness.spec import load_spec
    from harness.sweep.attach import run_points
    from tests.helpers.procs import SimProc

    spec = load_spec(_spec(tmp_path, "multi-turn", 4))
    srv = SimProc(
        tmp_path, "--card-profile", "tiny-test", "--time-scale", "0.02", "--max-total-tokens", "600",
        "--fault-drop", "0.3", "--fault-seed", "3", "--sim-lockstep-wait", "5",
    )  # fmt: skip
    try:
        run_points(spec, base_url=srv.url, server_name="sim", node="n", capture_root=tmp_path / "cap")
        rows, _ = read_jsonl(tmp_path / "cap" / "n" / spec.name / "sim" / "seed=0" / "requests.jsonl")
    finally:
        srv.stop()
    assert any(r["error_kind"] == "disconnect" for r in rows)  # the fault did drop some streams
    assert "lockstep: the client owed" not in srv.log(), [ln for ln in srv.log().splitlines() if "owed" in ln]
