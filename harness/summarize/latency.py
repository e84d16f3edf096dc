"""Serving-benchmark figures of one point x seed: latency percentiles, throughput, goodput, client lateness.

TTFT, TPOT, ITL and E2E at p50/p90/p99 over the ok requests; ITL per output token (an event that carried
k tokens, where the server counted them, gives k gaps of gap / k); request and output-token throughput
over the span from the first scheduled send to the last completion. Goodput (only with a spec `slo`):
the fraction of the point's scheduled requests (those a duration_s left unsent aside) that finished ok
within every bound, and that many per second. Client lateness: sent - scheduled over sent requests,
less the time a request waited for a free slot under the concurrency cap (reported apart: slot_wait_s).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

PCTS = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
SLO_FIELDS = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2e_ms": "e2e_s"}


def _pcts(values: pd.Series | np.ndarray) -> dict[str, float | None]:
    s = pd.Series(values, dtype=float).dropna()
    return {name: (float(s.quantile(q)) if len(s) else None) for name, q in PCTS}


def _p50_p99(values: pd.Series) -> dict[str, float | None]:
    return {k: v for k, v in _pcts(values).items() if k != "p90"}


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df else pd.Series(np.nan, index=df.index)


def per_token_gaps(token_mono: Any, event_tokens: Any, completion_tokens: Any) -> np.ndarray:
    """Inter-token latencies of one request: event gaps spread over the tokens each event carried."""
    if not isinstance(token_mono, list) or len(token_mono) < 2:
        return np.empty(0)
    gaps = np.diff(np.asarray(token_mono, dtype=float))
    if isinstance(event_tokens, list) and len(event_tokens) == len(token_mono):
        k = np.maximum(np.asarray(event_tokens[1:], dtype=float), 1.0)
        return np.repeat(gaps / k, k.astype(int))
    if isinstance(completion_tokens, int) and completion_tokens > len(token_mono):
        k = (completion_tokens - 1) / (len(token_mono) - 1)  # only the total is known: an even spread
        return gaps / k
    return gaps


def latency_figures(df: pd.DataFrame, okmask: pd.Series, span: float | None) -> dict[str, Any]:
    ok = df[okmask]
    itl = [
        per_token_gaps(t, e, c)
        for t, e, c in zip(
            ok.get("token_mono", pd.Series(dtype=object)),
            ok.get("event_tokens", pd.Series([None] * len(ok), index=ok.index, dtype=object)),
            ok.get("completion_tokens", pd.Series([None] * len(ok), index=ok.index, dtype=object)),
            strict=False,
        )
    ]
    itl_all = np.concatenate(itl) if itl else np.empty(0)
    out_tok = float(_num(ok, "completion_tokens").fillna(0).sum())
    return {
        "latency": {
            "ttft_s": _pcts(_num(ok, "ttft_s")),
            "tpot_s": _pcts(_num(ok, "tpot_s")),
            "itl_s": _pcts(itl_all),
            "e2e_s": _pcts(_num(ok, "e2e_s")),
        },
        "throughput": {
            "requests_per_s": len(ok) / span if span else None,
            "output_tokens_per_s": out_tok / span if span else None,
        },
        # the client's own lateness: sent - scheduled less any wait for a free slot under the cap
        "client_late_s": _p50_p99(_num(df, "late_s") - _num(df, "slot_wait_s").fillna(0.0)),
        "slot_wait_s": _p50_p99(_num(df, "slot_wait_s")),
    }


def goodput(
    df: pd.DataFrame, okmask: pd.Series, span: float | None, slo: dict[str, float] | None, scheduled: int
) -> dict[str, Any] | None:
    """{fraction, requests_per_s, good, slo}; None without an SLO (never a made-up one)."""
    if not slo:
        return None
    good = okmask.copy()
    for key, bound_ms in slo.items():
        met = _num(df, SLO_FIELDS[key]).le(bound_ms / 1000.0)
        if key == "tpot_ms":  # undefined for a one-token answer, which meets a TPOT bound by definition
            met |= _num(df, "completion_tokens").le(1)
        good &= met
    n = int(good.sum())
    return {
        "fraction": n / scheduled if scheduled else None,
        "requests_per_s": n / span if span else None,
        "good": n,
        "slo": dict(slo),
    }
