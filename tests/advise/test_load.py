"""advise at load: the load the flags and the input name, TTFT that moves with --speedup, the hit rate
at that load, and bad load flags refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.advise.grid import Candidate
from harness.advise.load import at_load, load_of, replay_at_load
from harness.advise.physics import model
from harness.cli import main
from harness.errors import HarnessError
from harness.sim.timing import resolve_profile
from harness.whatif.grid import Config
from harness.whatif.inputs import read_mooncake
from harness.whatif.replay import replay
from harness.whatif.trace import Trace

MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def _trace(n: int = 400) -> Trace:
    t = read_mooncake(MOONCAKE)
    t.requests = t.requests[:n]
    return t


def test_the_load_a_trace_and_the_flags_name() -> None:
    t = _trace()
    span = t.requests[-1].arrival - t.requests[0].arrival
    load = load_of(t, speedup=2.0)
    assert load.kind == "trace" and load.span_s == pytest.approx(span / 2)
    assert load.offered_rps == pytest.approx(len(t.requests) / (span / 2))
    assert at_load(t, load).requests[-1].arrival == pytest.approx(t.requests[-1].arrival / 2)
    assert at_load(t, load).concurrency == len(t.requests)  # open loop: nothing capped
    assert load_of(t, concurrency=8).describe() == "8 requests in flight (closed loop)"
    c = at_load(t, load_of(t, concurrency=8))
    assert c.concurrency == 8 and all(r.arrival == 0.0 for r in c.requests)
    assert at_load(t, load_of(t, rate=3.0)).request_rate == 3.0
    with pytest.raises(HarnessError, match="--speedup"):
        load_of(t, speedup=0)


def test_ttft_moves_with_the_speedup_and_the_hit_rate_is_the_one_at_load() -> None:
    t = _trace()
    prof = resolve_profile("h100", "llama-3.1-8b-instruct")
    cfg = Config("lru", 300, host_ratio=2.0)
    res = replay(t, cfg, card=prof)
    cand = Candidate(cfg, res, model(t, res, prof))
    fast, slow = (
        replay_at_load(t, [("recommendation", cand)], load_of(t, speedup=s), prof)[0] for s in (4.0, 0.25)
    )
    assert fast.ttft_ms["mean"] > 2 * slow.ttft_ms["mean"]  # queueing at 16x the arrival rate
    assert slow.one_at_a_time_ttft_ms == cand.modelled.ttft_ms
    # at a quarter of the rate requests seldom overlap: the hit rate is near the one-at-a-time replay's
    assert abs(slow.hit_rate - res.hit_rate) < 0.01
    two = replay_at_load(t, [("today", cand)], load_of(t, speedup=4.0), prof, replicas=2)[0]
    assert two.replicas == 2 and two.ttft_ms["mean"] < fast.ttft_ms["mean"]  # two workers share the queue


def test_bad_load_flags_are_one_line_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    for flag, value in (("--speedup", "0"), ("--concurrency", "0"), ("--rate", "-1")):
        assert main(["advise", str(MOONCAKE), flag, value]) == 2
        err = capsys.readouterr().err
        assert flag in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
