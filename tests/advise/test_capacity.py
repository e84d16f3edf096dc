"""Capacity at an SLO: the search brackets the highest load that serves, the fewest replicas, overload
named from the backlog, the SLO's forms, and advise's headline that moves with the load."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.advise.capacity import Tried, fewest_replicas, highest, overloaded, search
from harness.advise.slo import DEFAULT_SLO, Bound, Slo, parse_slo
from harness.cli import main
from harness.errors import HarnessError

MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def _probe_at(limit: float, calls: list[float]):
    def probe(f: float) -> Tried:
        calls.append(f)
        ok = f <= limit
        return Tried(f * 2.0, f, 1, ok, False, 1.0 if ok else 0.0, {}, 0.1)

    return probe


@pytest.mark.parametrize("limit", [0.03, 0.3, 1.0, 1.7, 5.0, 40.0])
def test_search_brackets_the_highest_serving_load_within_its_bisection(limit: float) -> None:
    calls: list[float] = []
    tried = search(_probe_at(limit, calls), steps=4)
    cap = highest(tried, tokens_per_request=1000.0)
    assert cap.rps is not None
    f = cap.rps / 2.0
    assert f <= limit < f * 2 ** (1 / 16) + 1e-9  # bracketed to 2^(1/2^4)
    assert cap.input_tokens_per_s == pytest.approx(cap.rps * 1000.0)
    assert len(calls) <= 2 + abs(math.log2(limit)) + 1 + 4  # doubling or halving, then 4 bisections


def test_search_says_none_when_no_load_serves_and_stops_at_its_cap() -> None:
    calls: list[float] = []
    assert highest(search(_probe_at(1e-6, calls)), 1.0).rps is None
    assert min(calls) == pytest.approx(1 / 64)  # halved down to the cap, then gave up
    calls = []
    cap = highest(search(_probe_at(1e6, calls)), 1.0)
    assert cap.rps == pytest.approx(64 * 2.0) and max(calls) == 64  # every load up to the cap served


def test_an_overloaded_probe_never_counts_as_serving() -> None:
    def probe(f: float) -> Tried:
        return Tried(f, f, 1, True, f > 2.5, 1.0, {}, 0.0)  # meets the SLO, but the queue grows past 2.5

    cap = highest(search(probe), 1.0)
    assert cap.rps is not None and 2.0 <= cap.rps <= 2.5


def test_fewest_replicas_walks_down_from_a_serving_guess_and_up_from_a_failing_one() -> None:
    def probe(n: int) -> Tried:
        return Tried(1.0, 1.0, n, n >= 5, False, 1.0, {}, 0.0)

    assert fewest_replicas(probe, guess=7, most=8)[0] == 5
    n, tried = fewest_replicas(probe, guess=2, most=8)
    assert n == 5 and [t.replicas for t in tried] == [2, 3, 4, 5]
    assert fewest_replicas(probe, guess=2, most=4)[0] is None  # none up to the node's GPUs


def test_overload_is_the_backlog_at_the_last_arrival() -> None:
    arrivals = [float(i) for i in range(100)]
    steady = [0.5] * 100
    assert not overloaded(arrivals, steady)
    growing = [0.1 * i for i in range(100)]  # each waits longer: the tail answers after the last arrival
    assert overloaded(arrivals, growing)
    assert overloaded(arrivals, [float("nan")] * 100)  # never answered
    assert not overloaded([], [])


def test_slo_forms_parse_and_state_themselves() -> None:
    assert DEFAULT_SLO.describe() == "TTFT p90 <= 2 s"
    s = parse_slo("ttft_p90_ms=15000,tpot_p99_ms=80")
    assert s is not None
    assert s.capacity_bounds() == (Bound("ttft", 90.0, 15000.0), Bound("tpot", 99.0, 80.0))
    assert s.describe() == "TTFT p90 <= 15 s, TPOT p99 <= 80 ms"
    per = parse_slo("ttft_ms=500")
    assert per is not None and per.describe() == "TTFT p90 <= 500 ms"  # a per-request bound read as p90
    for bad, word in (("ttft_p0_ms=5", "percentile"), ("ttft=5", "expected"), ("ttft_p90_ms=-1", "positive"),
                      ("ttft_p90_ms=x", "bad value"), ("ttft_p90_ms=1,ttft_p99_ms=2", "second")):  # fmt: skip
        with pytest.raises(HarnessError, match=word):
            parse_slo(bad)


def test_slo_meets_and_attainment_on_a_replay() -> None:
    s = Slo(bounds=(Bound("ttft", 90.0, 1000.0),))
    ttft = [0.1] * 90 + [5.0] * 10
    assert s.meets(ttft) and s.attainment(ttft) == pytest.approx(0.9)
    assert not s.meets([0.1] * 80 + [5.0] * 20)
    assert not s.meets([0.1] * 89 + [float("nan")] * 11)  # no answer counts as a miss
    assert s.figures(ttft) == {"TTFT p90 <= 1 s": pytest.approx(100.0)}


def _slice(tmp_path: Path, n: int) -> Path:
    lines = MOONCAKE.read_text().splitlines()[:n]
    p = tmp_path / "slice.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.slow
def test_gpus_needed_moves_with_the_load_and_leads_the_headline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(tmp_path, 1200)
    base = [
        "advise",
        str(trace),
        "--card",
        "h100",
        "--model",
        "llama-3.1-8b-instruct",
        "--host-memory",
        "512",
    ]
    base += ["--slo", "ttft_p90_ms=30000", "--json", "--workers", "2"]
    got = {}
    for sp in ("0.1", "3"):
        assert main([*base, "--speedup", sp]) == 0
        got[sp] = json.loads(capsys.readouterr().out)
    low, high = got["0.1"], got["3"]
    assert low["slo"]["describe"] == "TTFT p90 <= 30 s"
    rows_low = {r["role"]: r for r in low["modelled"]["at_load"]}
    rows_high = {r["role"]: r for r in high["modelled"]["at_load"]}
    assert rows_low["today"]["gpus_needed"] == 1
    assert rows_high["today"]["gpus_needed"] is None or rows_high["today"]["gpus_needed"] > 1
    assert rows_high["today"]["overloaded"] and not rows_low["today"]["overloaded"]
    cap = rows_low["today"]["capacity"]
    assert cap["rps"] > 0 and any(not t["meets"] or t["overloaded"] for t in cap["tried"])
    # the capacity does not depend on the load the search started from (same trace, same SLO)
    assert rows_high["today"]["capacity"]["rps"] == pytest.approx(cap["rps"], rel=0.15)
    assert low["headline_at_load"].startswith("At your load (")
    assert "one H100 meets the SLO" in low["headline_at_load"]
    assert "needs" in high["headline_at_load"] and high["headline_at_load"] != low["headline_at_load"]
    assert high["recommendation"]["headline"].startswith(high["headline_at_load"])


@pytest.mark.slow
def test_an_slo_no_replica_count_meets_says_so_with_the_share_and_the_levers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _slice(tmp_path, 600)
    args = [
        "advise",
        str(trace),
        "--card",
        "l4",
        "--model",
        "qwen3-0.6b",
        "--slo",
        "ttft_p90_ms=20",
        "--json",
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    head = out["headline_at_load"]
    assert "no number of L4s meets the SLO" in head and "--tp" in head and "looser SLO" in head
    today = next(r for r in out["modelled"]["at_load"] if r["role"] == "today")
    assert today["capacity"]["rps"] is None and today["gpus_needed"] is None and today["floor_share"] > 0.1


AGENTIC = Path(__file__).resolve().parents[1] / "data" / "agentic"


def test_agents_per_replica_on_an_agentic_folder(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["advise", str(AGENTIC), "--card", "h100", "--model", "llama-3.1-8b-instruct", "--json"]
    assert main([*base, "--agents", "3", "--slo", "ttft_p95_ms=10000", "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    ag = out["agents"]
    assert ag["agents"] == 3 and ag["slo"] == "TTFT p95 <= 10 s"
    # the sample's five conversations all fit one H100 within 10 s: the search stops at the folder's size
    assert set(ag["agents_per_replica"].values()) == {5}
    assert "One H100 holds 5 agents" in out["headline_at_load"]
    # what a tool gap costs: returning requests by gap, today's and the recommendation's, and the pool
    # that keeps a p95 gap's prefix (the tokens written a second over that gap)
    today = ag["gap_tables"]["today"]
    assert today["requests"] == sum(r["requests"] for r in today["rows"]) > 0
    assert ag["pool_for_p95_gap"] == math.ceil(ag["written_tokens_per_s"] * ag["gap_p95_s"] / 64)
    assert set(ag["policy_hit_rates"]) >= {"lru", "tlru"}
    assert main([*base, "--workers", "1"]) == 0  # no --slo: the agents' default, TTFT p95 <= 2 s
    assert json.loads(capsys.readouterr().out)["slo"]["describe"] == "TTFT p95 <= 2 s"


def test_agents_flag_is_checked_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    for extra, word in (
        (["--agents", "0"], "must be 1 or more"),
        (["--agents", "4", "--rate", "2"], "one of"),
    ):
        assert main(["advise", str(AGENTIC), *extra]) == 2
        err = capsys.readouterr().err
        assert "--agents" in err and word in err and "Traceback" not in err
