"""The way in (harness/sim/ingest.py): what reaches an idle or a busy scheduler, and when, as in SGLang.

SGLang 0.5.23 serves the first request of a burst alone and the rest in the next batch, so they find
its prefix cached (docs/sglang-scheduling.md); a scheduler busy with a forward takes everything that
reached it meanwhile in one batch; at concurrency 1 nothing but the arrival-to-scheduler delay moves.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness.sim.engine import Engine, EngineConfig, SimRequest
from harness.sim.ingest import INGEST_LATENCY_S, Ingest, idle_poll
from harness.sim.live import LiveEngine
from harness.sim.simulate import simulate
from harness.whatif.inputs import Trace, TraceRequest
from harness.whatif.replay import Config, closed_loop, engine_config


class Batches:
    """Every prefill line the engine logs: (#new-seq, #new-token, #cached-token, #running-req)."""

    def __init__(self) -> None:
        self.prefills: list[tuple[int, int, int, int]] = []

    def prefill(self, **f: Any) -> None:
        self.prefills.append((f["new_seq"], f["new_token"], f["cached_token"], f["running_req"]))

    def decode(self, **f: Any) -> None:
        pass


def _burst() -> list[SimRequest]:
    """The issue-23 burst: two groups of 272-token prompts, the first 260 tokens shared in a group."""
    out = []
    for i, group in enumerate((0, 0, 1, 1)):
        shared = [10_000 * (group + 1) + k for k in range(260)]
        own = [50_000 + 100 * i + k for k in range(12)]
        out.append(SimRequest(rid=str(i), input_ids=shared + own, output_ids=[7] * 16, order=i))
    return out


def _config(latency_s: float | None = None, poll_s: float = 0.0, **kw: Any) -> EngineConfig:
    return EngineConfig(pool_tokens=1200, card="l4", ingest_latency_s=latency_s, idle_poll_s=poll_s, **kw)


def test_idle_scheduler_serves_a_burst_first_request_alone() -> None:
    """As SGLang logs it: `#new-seq: 1, #new-token: 272, #cached-token: 0`, then the other three with the
    first one's 260-token prefix cached: `#new-seq: 3, #new-token: 556, #cached-token: 260`."""
    log = Batches()
    done = {r.rid: r for r in simulate(_burst(), _config(), log=log)}
    assert log.prefills[:2] == [(1, 272, 0, 0), (3, 556, 260, 1)]
    assert [done[str(i)].cached_tokens for i in range(4)] == [0, 260, 0, 0]
    # the tokenizer manager hands them over one latency apart, in arrival order
    assert [done[str(i)].received for i in range(4)] == pytest.approx(
        [INGEST_LATENCY_S * k for k in (1, 2, 3, 4)]
    )


def test_without_the_ingest_latency_a_burst_is_one_batch() -> None:
    """The control: 0 hands the burst over at once (the sim before this model): one batch, no hits."""
    log = Batches()
    simulate(_burst(), _config(0.0), log=log)
    assert log.prefills[0] == (4, 1088, 0, 0)


@pytest.mark.parametrize(
    ("poll_s", "first_batches"),
    [
        (0.0015, [(1, 272, 0, 0), (3, 556, 260, 1)]),  # the spin at 1.5 ms finds the first request only
        (0.0025, [(2, 544, 0, 0), (2, 544, 0, 2)]),  # ... at 2.5 ms the first two (one group: no hit)
        (0.005, [(4, 1088, 0, 0)]),  # ... at 5 ms all four
    ],
)
def test_a_slow_idle_loop_takes_in_what_landed_before_its_spin(
    poll_s: float, first_batches: list[tuple[int, int, int, int]]
) -> None:
    """With --sim-idle-poll-ms the idle scheduler sees the socket once per spin (from when it went idle):
    the burst's first batch is whatever reached it by that spin, the split a loaded CPU run of SGLang
    shows (1 + 3, 2 + 2 and 4 were all seen there)."""
    log = Batches()
    simulate(_burst(), _config(poll_s=poll_s), log=log)
    assert log.prefills[: len(first_batches)] == first_batches


def test_busy_scheduler_takes_what_arrived_during_a_step_together() -> None:
    """A request decoding; three arrive during one decode step. They reach the scheduler 1 ms apart,
    all before that step ends, and run as one prefill batch beside the running request."""
    cfg = _config()
    probe = Engine(cfg)
    step = probe.card.decode_time(1, 200)
    assert step > 4 * INGEST_LATENCY_S  # an L4 decode step of an 8B model: ~20 ms
    t = 0.5  # well into the long request's decode

    def requests() -> list[SimRequest]:
        long = SimRequest(rid="long", input_ids=list(range(1, 101)), output_ids=[7] * 400)
        return [long] + [
            SimRequest(rid=f"r{i}", input_ids=[900 + i] * 50, output_ids=[7] * 4, arrival=t, order=i)
            for i in range(3)
        ]

    log = Batches()
    done = {r.rid: r for r in simulate(requests(), cfg, log=log, jump=False)}
    assert log.prefills == [(1, 100, 0, 0), (3, 150, 0, 1)]
    got = [done[f"r{i}"] for i in range(3)]
    assert [r.received for r in got] == pytest.approx([t + INGEST_LATENCY_S * k for k in (1, 2, 3)])
    assert len({r.first_token_time for r in got}) == 1  # one batch
    # their prefill started when the decode step in flight as the last one reached the scheduler ended
    first, last = got[0].first_token_time, got[2].received
    assert first is not None and last is not None
    start = first - probe.card.batch_prefill_time([(50, 0)] * 3)
    assert last <= start < last + 1.5 * step
    # the fast-forwarded decode gives the same result
    again = {r.rid: r for r in simulate(requests(), cfg, jump=True)}
    assert {k: (v.first_token_time, v.finish_time) for k, v in again.items()} == {
        k: (v.first_token_time, v.finish_time) for k, v in done.items()
    }


def _trace(concurrency: int) -> Trace:
    """Two groups x 4 prompts (shared 260-token prefixes), sent at `concurrency` in a closed loop."""
    reqs = []
    for i, r in enumerate(_burst() + _burst()):
        key = tuple(r.input_ids[:-1]) + (60_000 + i,)
        reqs.append(TraceRequest(key=key, tokens=len(key), output_key=tuple(r.output_ids), index=i))
    return Trace("burst", reqs, unit=1, kind="tokens", concurrency=concurrency)


def _replay(trace: Trace, latency_s: float) -> dict[int, SimRequest]:
    econf = engine_config(Config("lru", 1200), "l4")
    econf.ingest_latency_s = latency_s
    first, on_finish = closed_loop(trace)
    return {int(d.rid): d for d in simulate(first, econf, on_finish=on_finish)}


def test_concurrency_one_is_unchanged_but_for_the_way_in() -> None:
    """At c=1 every request meets an idle scheduler: the same hits, each request's time from reaching
    the scheduler to its first token and its finish equal to the latency-free run's from its arrival."""
    trace = _trace(1)
    base, now = _replay(trace, 0.0), _replay(trace, INGEST_LATENCY_S)
    assert [base[i].cached_tokens for i in base] == [now[i].cached_tokens for i in base]
    assert sum(r.cached_tokens for r in now.values()) > 0
    for i in base:
        b, n = base[i], now[i]
        assert n.received == pytest.approx(n.arrival + INGEST_LATENCY_S)
        assert (n.first_token_time or 0) - (n.received or 0) == pytest.approx(
            (b.first_token_time or 0) - b.arrival
        )
        assert (n.finish_time or 0) - (n.received or 0) == pytest.approx((b.finish_time or 0) - b.arrival)


@pytest.mark.parametrize("poll_s", [0.0, 0.0025])
def test_live_engine_serves_the_burst_as_simulate_does(poll_s: float) -> None:
    """The live loop pushes arrivals through the same tokenizer-manager model: the same batches."""
    want = Batches()
    ref = {r.rid: r for r in simulate(_burst(), _config(poll_s=poll_s), log=want)}
    got_log = Batches()
    engine = Engine(_config(poll_s=poll_s), log=got_log)
    live = LiveEngine(engine, time_scale=0.0002, log_info=lambda _s: None, log_warning=print)

    async def run() -> dict[str, SimRequest]:
        task = asyncio.create_task(live.run())
        reqs = _burst()
        events = [asyncio.Event() for _ in reqs]
        for r, ev in zip(reqs, events, strict=True):
            r.on_event = lambda q, ev=ev: ev.set() if q.finished else None
            live.submit(r, None)
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in events)), 30)
        task.cancel()
        return {r.rid: r for r in reqs}

    got = asyncio.run(run())
    assert got_log.prefills == want.prefills
    for rid, r in ref.items():
        assert (got[rid].cached_tokens, got[rid].received) == (r.cached_tokens, pytest.approx(r.received))
        assert got[rid].finish_time == pytest.approx(r.finish_time)


def test_idle_poll_rounds_up_to_the_next_spin() -> None:
    assert idle_poll(1.0, 0.0, 0.0) == 1.0
    assert idle_poll(0.0011, 0.0, 0.001) == pytest.approx(0.002)
    assert idle_poll(0.003, 0.0, 0.001) >= 0.003
    assert idle_poll(5.0, 7.0, 0.5) == 5.0  # reached before the scheduler went idle: the next iteration


def test_ingest_is_one_server_in_arrival_order() -> None:
    ing = Ingest(0.002)
    a, b, c = (SimRequest(rid=x, input_ids=[1], output_ids=[1]) for x in "abc")
    assert ing.send(a, 1.0) == pytest.approx(1.002)
    assert ing.send(b, 1.0) == pytest.approx(1.004)  # waits for a
    assert ing.send(c, 5.0) == pytest.approx(5.002)  # the manager was idle by then
    assert ing.receive(1.003) == [a]
    assert ing.remove(c) and not ing.remove(c)
    assert ing.next_at() == pytest.approx(1.004) and len(ing) == 1
    assert ing.receive(10.0) == [b] and ing.next_at() is None


def test_flag_sets_the_latency_and_bad_values_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.sim.args import build_parser

    ns = build_parser().parse_args(["--sim-ingest-latency-ms", "2.5", "--sim-idle-poll-ms", "4"])
    cfg = EngineConfig.from_args(ns)
    assert (cfg.ingest_latency_s, cfg.idle_poll_s) == (pytest.approx(0.0025), pytest.approx(0.004))
    ns = build_parser().parse_args([])
    cfg = EngineConfig.from_args(ns)
    assert (cfg.ingest_latency_s, cfg.idle_poll_s) == (INGEST_LATENCY_S, 0.0)
    for flag in ("--sim-ingest-latency-ms", "--sim-idle-poll-ms"):
        for bad in ("-1", "nan"):
            with pytest.raises(SystemExit) as exit_info:
                build_parser().parse_args([flag, bad])
            assert exit_info.value.code == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and f"{flag}: must be in [0, 60000)" in err[0]
