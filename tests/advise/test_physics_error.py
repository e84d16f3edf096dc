"""The card physics against published measurements (issue 58, item 7): the error bands a capacity range
rests on, and docs/physics.md's figures recomputed from the code (never hand-typed and forgotten)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from harness.advise.physics_error import LARGE, checks, modelled_s, physics_error
from harness.sim.cards import FIT_POINTS, Measurement, held_out
from harness.sim.timing import resolve_profile

DOC = Path(__file__).resolve().parents[2] / "docs" / "physics.md"
PROFILES = [
    ("h100", "Llama-3.1-8B-Instruct"),
    ("h200", "Llama-3.1-8B-Instruct"),
    ("l4", "Qwen3-8B"),
    ("l4", "Llama-3.1-8B-Instruct"),
]


def _table(heading: str) -> list[list[str]]:
    """The body rows of the first Markdown table under `heading` in docs/physics.md, cells stripped."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:]  # the header row off


def _num(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_each_documented_row_is_the_models_figure_for_that_measurement() -> None:
    rows = _table("## Each measurement against the model")
    assert len(rows) == len(checks()) == len(FIT_POINTS) + len(held_out())
    fitted = {id(m) for m, _ in FIT_POINTS}
    for row, c in zip(rows, checks(), strict=True):
        m = c.measurement
        assert (row[1], row[2], row[3]) == (m.card, m.kind, "yes" if id(m) in fitted else "no"), row
        assert row[4] == m.what and row[5] == m.source, row
        assert _num(row[6]) == pytest.approx(m.measured_s * 1e3, abs=0.005), row
        assert _num(row[7]) == pytest.approx(c.modelled_s * 1e3, abs=0.005), row
        assert _num(row[8]) == pytest.approx(c.ratio, abs=0.0005), row


def test_each_documented_band_is_what_physics_error_returns() -> None:
    rows = {r[0]: r for r in _table("## The bands advise carries")}
    assert set(rows) == {resolve_profile(c, m).name for c, m in PROFILES}
    for card, model in PROFILES:
        e = physics_error(resolve_profile(card, model))
        row = rows[e.profile]
        assert e.prefill is not None and e.decode is not None
        assert (
            row[1] == f"{e.prefill.card}, {e.prefill.rows}" and row[4] == f"{e.decode.card}, {e.decode.rows}"
        )
        got = [_num(row[i]) for i in (2, 3, 5, 6, 7, 8)]
        want = [
            e.prefill.gmean_ratio,
            e.prefill.worst_ratio,
            e.decode.gmean_ratio,
            e.decode.worst_ratio,
            e.low,
            e.high,
        ]
        assert got == pytest.approx(want, abs=0.0005), row
        assert row[9] == ("yes" if e.is_large else "no")


def test_the_modelled_figure_is_the_profiles_own_for_bf16_rows() -> None:
    """The table costs each measurement with the same terms advise's profiles add up: where a row is a
    built-in model in bf16, the profile's decode step or prefill forward gives the same seconds."""
    h100 = resolve_profile("h100", "Llama-3.1-8B-Instruct")
    l4 = resolve_profile("l4", "Qwen3-8B")
    by_what = {c.measurement.what.split(":")[0]: c for c in checks()}
    decode = by_what["Llama-3.1-8B bf16, batch-1 decode with CUDA graphs"]
    assert h100.decode_time(1, 0) == pytest.approx(decode.modelled_s, rel=1e-9)
    prefill = next(c for c in checks() if c.measurement.card == "h100" and c.measurement.kind == "prefill")
    assert h100.batch_prefill_time([(8192, 0)]) == pytest.approx(prefill.modelled_s, rel=1e-9)
    cold = next(c for c in checks() if "0 cached" in c.measurement.what)
    assert l4.batch_prefill_time([(1366, 0), (1365, 0), (1365, 0)]) == pytest.approx(
        cold.modelled_s, rel=1e-9
    )
    warm = next(c for c in checks() if "2,196 cached" in c.measurement.what)
    assert l4.batch_prefill_time([(1024, 549)] * 4) == pytest.approx(warm.modelled_s, rel=1e-9)
    h200 = next(c for c in checks() if c.measurement.card == "h200")  # batch 8 at its mean context
    profile = resolve_profile("h200", "Llama-3.1-8B-Instruct")
    assert profile.decode_time(8, 8 * (32 + 64)) == pytest.approx(h200.modelled_s, rel=1e-9)


def test_the_seeds_l4_lines_are_costed_as_qwen3_8b() -> None:
    """The seed's L4 served Qwen3-8B (its 24,094-token pool): its prefill lines pay 36 layers' launch cost."""
    lines = [c for c in checks() if c.measurement.card == "l4" and c.measurement.kind == "prefill"]
    assert len(lines) == 2 and all(c.measurement.what.startswith("Qwen3-8B") for c in lines)
    assert all(c.measurement.layers == 36 for c in lines)
    # 4,096 new tokens at 1,431.87 token/s: the documented line, 2.86 s a forward
    warm = next(c for c in lines if "1,431.87" in c.measurement.what)
    assert warm.measurement.measured_s == pytest.approx(4096 / 1431.87)


def test_a_profile_takes_its_own_cards_rows_else_the_nearest_cards() -> None:
    l4 = physics_error(resolve_profile("l4", "Qwen3-8B"))
    assert l4.prefill is not None and l4.decode is not None
    assert (l4.prefill.card, l4.prefill.rows, l4.decode.card, l4.decode.rows) == ("l4", 2, "l4", 1)
    h200 = physics_error(
        resolve_profile("h200", "Llama-3.1-8B-Instruct")
    )  # no prefill of its own: the H100's
    assert h200.prefill is not None and h200.prefill.card == "h100"
    assert h200.decode is not None and (h200.decode.card, h200.decode.rows) == ("h200", 1)  # its held-out row
    gb10 = physics_error(resolve_profile("gb10"))  # decode rows of its own, prefill from the nearest card
    assert gb10.decode is not None and gb10.decode.card == "gb10" and gb10.decode.rows == 2
    assert gb10.prefill is not None and gb10.prefill.card != "gb10"


def test_the_range_holds_every_applicable_row_and_the_point() -> None:
    for card, model in PROFILES:
        e = physics_error(resolve_profile(card, model))
        rows = [
            c
            for c in checks()
            if any(
                c.measurement.card == b.card and c.measurement.kind == b.kind
                for b in (e.prefill, e.decode)
                if b
            )
        ]
        assert rows
        assert e.low <= 1.0 <= e.high
        assert all(e.low - 1e-12 <= 1 / c.ratio <= e.high + 1e-12 for c in rows)
        assert min(1 / c.ratio for c in rows) == pytest.approx(e.low) or e.low == 1.0
        assert max(1 / c.ratio for c in rows) == pytest.approx(e.high) or e.high == 1.0
    h100 = physics_error(resolve_profile("h100", "Llama-3.1-8B-Instruct"))
    assert h100.prefill is not None
    lo, hi = h100.capacity_range(10.0)  # the model is slow on both kinds there: the range runs upward
    assert lo == pytest.approx(10.0) and hi == pytest.approx(10 / h100.prefill.worst_ratio)


def test_the_h100_prefill_is_the_largest_error_and_says_so() -> None:
    """The one eta_c fitted over cards is ~1.6x pessimistic on the H100's prefill (8k-token forwards):
    its capacity may be up to ~1.64x the point, and the record says the range matters."""
    e = physics_error(resolve_profile("h100", "Llama-3.1-8B-Instruct"))
    assert e.prefill is not None and e.prefill.worst_ratio == pytest.approx(0.610, abs=0.001)
    assert e.is_large and e.worst_error > 0.6 and e.high == pytest.approx(1.638, abs=0.001)


def test_small_errors_are_not_large_and_a_hand_set_profile_has_no_band(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import harness.advise.physics_error as pe

    tiny = pe.physics_error(resolve_profile("tiny-test"))
    assert (tiny.low, tiny.high, tiny.is_large, tiny.prefill, tiny.decode) == (1.0, 1.0, False, None, None)
    # a model within 5 % everywhere: a band, a range, but not large
    close = tuple(pe.Check(c.measurement, c.measurement.measured_s * 1.05) for c in pe.checks())
    monkeypatch.setattr(pe, "checks", lambda: close)
    pe._for_card.cache_clear()
    try:
        e = pe.physics_error(resolve_profile("l4", "Qwen3-8B"))
        assert not e.is_large and e.worst_error == pytest.approx(0.05) and e.worst_error < LARGE
        assert e.low == 1.0 and e.high == pytest.approx(1.05)
    finally:
        pe._for_card.cache_clear()


def test_modelled_s_costs_a_foreign_row_by_its_own_work() -> None:
    m = Measurement("h100", "x", "y", 1.0, 2.0e12, "prefill", 40)
    from harness.sim.cards import CARDS, ETA_C, PREFILL_PER_LAYER_S

    c = CARDS["h100"]
    assert modelled_s(m) == pytest.approx(
        2.0e12 / (ETA_C * c.bf16_tflops * 1e12 * c.sm_typical_mhz / c.sm_max_mhz) + 40 * PREFILL_PER_LAYER_S
    )


def test_the_figures_the_prose_quotes_are_the_codes() -> None:
    """docs/physics.md's sentences quote figures too: each is recomputed here."""
    from harness.sim.cards import CARDS, DECODE_PER_SEQ_S, ETA_BW, ETA_C, PREFILL_PER_LAYER_S

    text = DOC.read_text(encoding="utf-8")
    assert f"η_bw = {ETA_BW:.2f}" in text and f"η_c = {ETA_C:.2f}" in text
    assert f"(0.31208 → {ETA_C:.5f})" in text
    assert f"the worst row is {LARGE * 100:.0f} % or more off" in text
    for name, label in (("l4", "an L4"), ("h100", "an H100")):
        hw = CARDS[name]
        assert f"{hw.sm_typical_mhz:,.0f}/{hw.sm_max_mhz:,.0f} on {label}" in text
    fitted = {id(m) for m, _ in FIT_POINTS}
    decode = [c.ratio for c in checks() if c.measurement.kind == "decode" and id(c.measurement) in fitted]
    assert f"within −{(1 - min(decode)) * 100:.0f} % to +{(max(decode) - 1) * 100:.0f} %" in text
    h200 = next(c for c in checks() if c.measurement.card == "h200")
    m = h200.measurement
    assert (
        f"took {m.measured_s * 1e3:.2f} ms a token" in text and f"says {h200.modelled_s * 1e3:.2f} ms" in text
    )
    assert f"{h200.ratio:.2f}× optimistic" in text
    implied = m.work / (CARDS["h200"].bw_gb_s * 1e9 * (m.measured_s - m.batch * DECODE_PER_SEQ_S))
    with_it = math.exp(
        statistics.fmean([*(math.log(e) for x, e in FIT_POINTS if x.kind == "decode"), math.log(implied)])
    )
    assert f"imply η_bw {implied:.2f} and move the fitted η_bw" in text
    assert (
        f"from {ETA_BW:.2f} to {with_it:.2f} ({(with_it / ETA_BW - 1) * 100:.0f} %)".replace("-", "−") in text
    )
    l4 = [c for c in checks() if c.measurement.card == "l4" and c.measurement.kind == "prefill"]
    lo, hi = sorted(c.ratio for c in l4)
    assert f"{lo:.2f}–{hi:.2f}×" in text
    h100 = next(c for c in checks() if c.measurement.card == "h100" and c.measurement.kind == "prefill")
    assert f"{h100.ratio:.2f}× ({1 / h100.ratio:.2f}× pessimistic)" in text
    warm = next(c for c in l4 if "1,431.87" in c.measurement.what)
    assert f"{warm.measurement.measured_s * 1e3:,.2f} ms a forward" in text
    clocks = []  # the SM clock at which the model gives each seed line's measured time
    for c in l4:
        fixed = c.measurement.layers * PREFILL_PER_LAYER_S
        clocks.append(
            CARDS["l4"].sm_typical_mhz * (c.modelled_s - fixed) / (c.measurement.measured_s - fixed)
        )
    assert f"at {clocks[0]:,.0f} and {clocks[1]:,.0f} MHz" in text
    for card in ("h100", "h200"):
        e = physics_error(resolve_profile(card, "Llama-3.1-8B-Instruct"))
        assert f"capacity × [{e.low:.2f}, {e.high:.2f}]" in text
    h = physics_error(resolve_profile("h100", "Llama-3.1-8B-Instruct"))
    q = physics_error(resolve_profile("l4", "Qwen3-8B"))
    assert (
        f"capacity × [{h.low:.2f}, {h.high:.2f}]" in text
        and f"capacity × [{q.low:.2f}, {q.high:.2f}]" in text
    )


def test_the_summary_names_the_worst_rows_and_the_range() -> None:
    e = physics_error(resolve_profile("h200", "Llama-3.1-8B-Instruct"))
    assert e.summary() == (
        "h200/Llama-3.1-8B-Instruct: modelled/measured rate, worst prefill 0.61x on h100 (1 row);"
        " decode 1.49x on h200 (1 row): capacity x [0.67, 1.64]"
    )
    assert "no published measurement" in physics_error(resolve_profile("tiny-test")).summary()
