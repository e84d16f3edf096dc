"""A point's tool-gap table (issue 59 item 4) from its records: for every returning request of an
agentic trace, the gap since its conversation's previous answer (sent or due, less that answer's end,
times the trace's `speedup`: the trace's own seconds) and where the server found its prefix, from the
per-request `cached_tokens_details` (device, host, storage) or recomputed (prompt less cached)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from harness.spec import TraceWorkload, Workload
from harness.summary.tool_gap import ToolGap
from harness.whatif.tool_gap import GapSample, gap_table


def _start(r: dict[str, Any]) -> float | None:
    """When the request was due (its gap ran out), else when it was sent (a closed loop untimed)."""
    s = r.get("scheduled_mono") or r.get("sent_mono")
    return float(s) if isinstance(s, int | float) else None


def _sample(prev: dict[str, Any], cur: dict[str, Any], speedup: float) -> GapSample | None:
    done, start = prev.get("done_mono"), _start(cur)
    prompt = cur.get("prompt_tokens") or cur.get("expected_prompt_tokens")
    if not isinstance(done, int | float) or start is None or not isinstance(prompt, int):
        return None
    cached = int(cur.get("cached_tokens") or 0)
    split = [cur.get(f"cached_{t}") for t in ("device", "host", "storage")]
    if all(v is None for v in split):  # SGLang sends null details on a full miss: that is all zeros
        tiers: list[int | None] = [0, 0, 0] if cached == 0 else [None, None, None]
    else:
        tiers = [int(v or 0) for v in split]
    return GapSample(max(0.0, start - float(done)) * speedup, prompt, cached, *tiers)


def samples(records: Iterable[dict[str, Any]], speedup: float = 1.0) -> list[GapSample]:
    """One sample per returning request whose previous request in its conversation ended ok."""
    by_session: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("warmup") or r.get("not_sent") or r.get("session") is None or r.get("turn") is None:
            continue
        by_session.setdefault(int(r["session"]), []).append(r)
    out: list[GapSample] = []
    for recs in by_session.values():
        recs.sort(key=lambda r: int(r["turn"]))
        for prev, cur in zip(recs, recs[1:], strict=False):
            if cur["turn"] == prev["turn"] + 1 and prev.get("ok") and cur.get("ok"):
                s = _sample(prev, cur, speedup)
                if s is not None:
                    out.append(s)
    return out


def point_tool_gap(seed_records: Iterable[list[dict[str, Any]]], wl: Workload | None) -> ToolGap | None:
    """The table over the seeds' records of an agentic trace point; None for any other workload or
    without a returning request."""
    if not isinstance(wl, TraceWorkload) or wl.format != "agentic":
        return None
    got = [s for recs in seed_records for s in samples(recs, wl.speedup)]
    table = gap_table(got, wl.speedup, "usage")
    return None if table is None else ToolGap.model_validate(dataclasses.asdict(table))
