"""The summary's `modelled` block: a sim point's TTFT, TPOT and tok/s from its virtual stamps."""

from __future__ import annotations

import pytest

from harness.engines import logs
from harness.sim.engine import SimRequest
from harness.sim.live import Pace, overhead_line, request_line
from harness.summarize.modelled import (
    SOURCE_LOG,
    SOURCE_RECORDS,
    from_log,
    from_records,
    point_modelled,
    seed_modelled,
)


def _row(arrival: float, first: float, finish: float, n: int, ok: bool = True) -> dict:
    st = {"arrival_s": arrival, "first_token_s": first, "finish_s": finish}
    return {"ok": ok, "completion_tokens": n, "sim_time": st}


def test_figures_from_record_stamps() -> None:
    rows = [
        _row(0.0, 0.1, 0.4, 4),
        _row(0.0, 0.3, 0.9, 7),
        _row(0.5, 0.6, 1.0, 1),
        _row(0.0, 9, 9, 3, ok=False),
    ]
    fig = from_records(rows)
    assert fig is not None and fig["requests"] == 3  # the failed request is left out
    assert fig["ttft_ms"]["p50"] == pytest.approx(100.0)  # 100, 300, 100 ms
    assert fig["ttft_ms"]["p99"] == pytest.approx(296.0)
    # per-token time after the first: (0.4 - 0.1) / 3 and (0.9 - 0.3) / 6; a 1-token answer has none
    assert fig["tpot_ms"]["p50"] == pytest.approx(100.0)
    assert fig["output_tok_s"] == pytest.approx(
        12 / 1.0
    )  # 12 tokens from the first arrival to the last finish
    assert from_records([{"ok": True, "completion_tokens": 3}]) is None  # no stamps: not a sim


def test_log_lines_round_trip_and_fallback() -> None:
    lines = []
    for rid, (a, f, e, n) in enumerate([(1.0, 1.2, 1.5, 4), (1.0, 1.4, 2.0, 4)]):
        r = SimRequest(str(rid), [1, 2, 3], [0] * n)
        r.arrival, r.first_token_time, r.finish_time, r.generated = a, f, e, n
        lines.append(f"[2026-12-01 09:00:00] {request_line(r)}")
    lines.append("[2026-12-01 09:00:01] " + overhead_line(Pace(5, 0.010, 0.0125, 0.001, 0.5), 0.02, 0))
    recs = logs.parse_lines(lines).records
    assert [r.kind for r in recs] == ["sim_request", "sim_request", "sim_overhead"]
    assert recs[2].fields["fraction"] == pytest.approx(0.25)
    fig = from_log(recs)
    assert fig is not None and fig["ttft_ms"]["p50"] == pytest.approx(300.0)
    assert fig["output_tok_s"] == pytest.approx(8 / 1.0)
    # records win; the log is the fallback; overhead warnings come along either way
    got, source, warned = seed_modelled([_row(0.0, 0.1, 0.4, 4)], recs)
    assert source == SOURCE_RECORDS and got["ttft_ms"]["p50"] == pytest.approx(100.0) and warned == [0.25]
    got, source, _ = seed_modelled([{"ok": True}], recs)
    assert source == SOURCE_LOG and got == fig
    assert seed_modelled([{"ok": True}], None) == (None, None, [])


def test_point_block_and_note() -> None:
    median = {"ttft_ms": {"p50": 1.0}, "tpot_ms": {"p50": 2.0}, "output_tok_s": 3.0, "requests": 4}
    block = point_modelled(median, [SOURCE_RECORDS, SOURCE_RECORDS], [0.25, 0.5])
    assert block["source"] == SOURCE_RECORDS and block["output_tok_s"] == 3.0
    assert len(block["notes"]) == 1 and "2 time(s)" in block["notes"][0] and "up to 50%" in block["notes"][0]
    assert block["wall_overhead_max"] == 0.5
    assert point_modelled(median, [SOURCE_RECORDS], [])["notes"] == []
    assert point_modelled(None, [], [0.3]) is None


def test_goodput_on_the_modelled_clock_is_what_the_search_judges() -> None:
    """Paced at --time-scale the wall clock meets a 100 ms TTFT bound for every request; on the card's
    clock two of four first tokens come after 300 ms: goodput 0.5 there, as the search's probe says."""
    from harness.spec.search import SearchSpec
    from harness.summarize.capacity import SeedRun, measure_probe
    from harness.summarize.modelled import card_goodput

    rows = [
        {**_row(0.0, first, first + 0.3, 4), "ttft_s": 0.01, "e2e_s": 0.02, "scheduled_mono": i}
        for i, first in enumerate((0.05, 0.08, 0.3, 0.4))
    ]
    rows.append({**_row(0, 0, 0, 1, ok=False), "ttft_s": None})  # a failed request counts against it
    slo = {"ttft_ms": 100.0}
    good = card_goodput(rows, slo, scheduled=5)
    assert good is not None and good["good"] == 2 and good["fraction"] == pytest.approx(0.4)
    assert good["requests_per_s"] == pytest.approx(2 / 0.7)  # over the card's span: 0 to the last finish
    probe = measure_probe(1, [SeedRun("ok", None, rows, 5)], SearchSpec("concurrency", 1, 2, slo))
    assert probe.goodput == pytest.approx(good["fraction"])
    assert card_goodput(rows, None, 5) is None  # no SLO: no goodput, never a made-up bound
    plain = [{k: v for k, v in r.items() if k != "sim_time"} for r in rows]
    assert card_goodput(plain, slo, 5) is None  # not a sim: no card clock
