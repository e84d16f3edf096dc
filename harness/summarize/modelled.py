"""A sim point's modelled figures: TTFT, time per output token and output tok/s on the sim's virtual clock.

serve-sim stamps each request's arrival, first token and finish on its own virtual clock (the modelled
card's time, harness.sim.live) and hands them over twice: in the answer (`sim_time`, kept in the
request record) and as one `Sim request finished` log line. These figures come from those stamps,
never from wall-clock time divided by --time-scale (which would count the machine's HTTP and event-loop
work as modelled milliseconds). Records first; the point's log slice when the records lack stamps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from harness import serverlog
from harness.summarize.latency import goodput

SOURCE_RECORDS = "sim virtual clock (request stamps)"
SOURCE_LOG = "sim virtual clock (server log)"


def _pcts(s: pd.Series) -> dict[str, float | None]:
    s = s.dropna()
    if s.empty:
        return {"p50": None, "p90": None, "p99": None}
    return {f"p{int(q * 100)}": float(s.quantile(q)) for q in (0.5, 0.9, 0.99)}


def figures(stamps: pd.DataFrame) -> dict[str, Any] | None:
    """From columns arrival, first_token, finish (modelled s) and completion_tokens, one row a request."""
    df = stamps.apply(pd.to_numeric, errors="coerce").dropna(subset=["arrival", "first_token", "finish"])
    if df.empty:
        return None
    ttft = (df["first_token"] - df["arrival"]) * 1000
    many = df[df["completion_tokens"] > 1]
    tpot = (many["finish"] - many["first_token"]) / (many["completion_tokens"] - 1) * 1000
    span = float(df["finish"].max() - df["arrival"].min())
    out_tok = float(df["completion_tokens"].fillna(0).sum())
    return {
        "ttft_ms": _pcts(ttft),
        "tpot_ms": _pcts(tpot),
        "output_tok_s": out_tok / span if span > 0 else None,
        "requests": len(df),
    }


def from_records(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The ok records' `sim_time` stamps; None when no record carries them (not a sim, or an old capture)."""
    out = []
    for r in rows:
        st = r.get("sim_time")
        if r.get("ok") and isinstance(st, dict):
            out.append(
                {
                    "arrival": st.get("arrival_s"),
                    "first_token": st.get("first_token_s"),
                    "finish": st.get("finish_s"),
                    "completion_tokens": r.get("completion_tokens"),
                }
            )
    return figures(pd.DataFrame(out)) if out else None


def from_log(records: Iterable[serverlog.LogRecord]) -> dict[str, Any] | None:
    """The point's `Sim request finished` lines (requests that finished normally)."""
    out = [
        {
            "arrival": r.fields.get("arrival"),
            "first_token": r.fields.get("first_token"),
            "finish": r.fields.get("finish"),
            "completion_tokens": r.fields.get("completion_token"),
        }
        for r in records
        if r.kind == "sim_request" and r.fields.get("finish_reason") != "abort"
    ]
    return figures(pd.DataFrame(out)) if out else None


def on_card_time(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with TTFT, TPOT, E2E and the span on the sim's modelled clock when every ok row carries its
    `sim_time` stamps (a sim at --time-scale X: its wall clock is not the card's); else the rows as they are."""
    ok = [r for r in rows if r.get("ok")]
    if not ok or not all(isinstance(r.get("sim_time"), dict) for r in ok):
        return rows
    out = []
    for r in rows:
        st = r.get("sim_time")
        if not r.get("ok") or not isinstance(st, dict):  # a failed request: in no latency, off both clocks
            out.append({**r, "scheduled_mono": None, "done_mono": None})
            continue
        stamps = [st.get(k) for k in ("arrival_s", "first_token_s", "finish_s")]
        nums = [float(x) for x in stamps if isinstance(x, int | float) and not isinstance(x, bool)]
        if len(nums) != 3:
            return rows
        a, f, e = nums
        n = r.get("completion_tokens")
        tpot = (e - f) / (n - 1) if isinstance(n, int) and n > 1 else None
        out.append(
            {**r, "ttft_s": f - a, "e2e_s": e - a, "tpot_s": tpot, "scheduled_mono": a, "done_mono": e}
        )
    return out


def card_goodput(
    rows: list[dict[str, Any]], slo: dict[str, float] | None, scheduled: int
) -> dict[str, Any] | None:
    """Goodput judged on the modelled clock (what a capacity search judges a sim probe by), in the shape of
    the wall-clock one; None without an SLO or without every ok row's stamps."""
    card = on_card_time(rows)
    if not slo or card is rows:
        return None
    df = pd.DataFrame(card)
    ok = df["ok"].fillna(False).astype(bool) if "ok" in df else pd.Series(False, index=df.index)
    start = pd.to_numeric(df["scheduled_mono"], errors="coerce").min()
    end = pd.to_numeric(df["done_mono"], errors="coerce").max()
    span = float(end - start) if pd.notna(start) and pd.notna(end) and end > start else None
    return goodput(df, ok, span, slo, scheduled)


def overheads(records: Iterable[serverlog.LogRecord]) -> list[float]:
    """The fractions of the sim's warnings that wall-clock overhead passed 5 % of the paced step time."""
    return [float(r.fields["fraction"]) for r in records if r.kind == "sim_overhead"]


def seed_modelled(
    rows: Iterable[dict[str, Any]], log_records: list[serverlog.LogRecord] | None
) -> tuple[dict[str, Any] | None, str | None, list[float]]:
    """One seed's modelled figures, where they came from, and the overhead warnings of its log slice."""
    warned = overheads(log_records or [])
    fig = from_records(rows)
    if fig is not None:
        return fig, SOURCE_RECORDS, warned
    fig = from_log(log_records or [])
    return fig, (SOURCE_LOG if fig is not None else None), warned


def point_modelled(
    median: dict[str, Any] | None, sources: list[str], warned: list[float]
) -> dict[str, Any] | None:
    """The point's `modelled` block: the seeds' median figures, their source, and a note when the sim
    warned that the machine could not keep the pace --time-scale asks for."""
    if not median:
        return None
    block: dict[str, Any] = {
        k: median.get(k) for k in ("ttft_ms", "tpot_ms", "output_tok_s", "requests", "goodput")
    }
    block["source"] = " + ".join(sorted(set(sources))) or None
    block["wall_overhead_max"] = max(warned) if warned else None
    block["notes"] = []
    if warned:
        block["notes"].append(
            f"serve-sim warned {len(warned)} time(s) that wall-clock overhead passed 5% of the modelled "
            f"step time (up to {max(warned):.0%}): the run took longer than --time-scale says and its "
            "wall-clock figures are not modelled time x --time-scale; modelled figures come from the "
            "virtual clock and are unaffected"
        )
    return block
