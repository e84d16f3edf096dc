"""The report's per-worker table for replicas points: where the gateway sent the requests, what each
worker's cache kept, how the prefill work split and what it cost in TTFT, so a routing policy's hit rate
shows beside the load skew it paid for it (harness.summarize.replicas computes the figures)."""

from __future__ import annotations

from typing import Any

from harness.report.common import as_points, point_order
from harness.report.tables import Cell, Points, Table, ms, num, pct

HEADER = [
    "server",
    "point",
    "worker",
    "requests",
    "hit % (usage / log / counters)",
    "prefill share",
    "prefill tokens",
    "TTFT p50 / p99 ms",
    "modelled TTFT p50 ms",
    "host / storage tokens",
    "cross-replica L3 hits",
    "note",
]


def _int(v: Any) -> str:
    return f"{v:,.0f}" if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def _rates(w: Any) -> str:
    return " / ".join(pct(w.get(k)) for k in ("hit_rate_usage", "hit_rate_log", "hit_rate_counters"))


def _total(workers: dict[str, Any], key: str) -> float | None:
    vals = [w.get(key) for w in workers.values() if w is not None]
    nums = [v for v in vals if isinstance(v, int | float)]
    return sum(nums) if nums else None


def _row(server: str, point: str, name: str, w: Any, note: str) -> list[str]:
    return [
        server,
        point,
        name,
        _int(w.get("requests")),
        _rates(w),
        pct(w.get("prefill_share")),
        _int(w.get("prefill_tokens")),
        f"{ms(w.get('ttft_p50_s'))} / {ms(w.get('ttft_p99_s'))}",
        num(w.get("modelled_ttft_p50_ms"), ".0f"),
        f"{_int(w.get('cached_host_tokens'))} / {_int(w.get('cached_storage_tokens'))}",
        _int(w.get("storage_hits_cross_replica")),
        note,
    ]


def worker_table(points: Points) -> Table | None:
    """Per replicas point, one row per worker and one `all` row with the point's load skew; None without one."""
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(as_points(points), key=point_order):
        m = p.median
        workers = m.get("workers")
        if not isinstance(workers, dict) or not workers:
            continue
        skew_worker = m.get("load_skew_worker")
        for name in sorted(workers):
            w = workers[name] or {}
            note = (m.get("load_skew_note") or "") if name == skew_worker else ""
            if w.get("clock_verdict") not in (None, "ok"):  # its own GPUs' verdict, when they were not fine
                note = "; ".join(
                    x for x in (note, f"clock {w['clock_verdict']} on GPUs {w.get('gpus')}") if x
                )
            rows.append([Cell(t) for t in _row(p.server, p.point_key, name, w, note)])
            keys.append(f"{p.server}|{p.point_key}")
        skew = m.get("load_skew")
        agg = {
            "requests": _total(workers, "requests"),
            "prefill_share": 1.0,
            "prefill_tokens": _total(workers, "prefill_tokens"),
            "storage_hits_cross_replica": m.get("storage_hits_cross_replica"),
            **{k: m.get(k) for k in ("hit_rate_usage", "hit_rate_log", "hit_rate_counters")},
            "ttft_p50_s": m.get("ttft_median_s"),
            "ttft_p99_s": m.get("ttft_p99_s"),
            "modelled_ttft_p50_ms": p.modelled.ttft_ms.p50 if p.modelled and p.modelled.ttft_ms else None,
            **{k: m.get(k) for k in ("cached_host_tokens", "cached_storage_tokens")},
        }
        note = f"load skew {skew:.2f}x" if isinstance(skew, int | float) else ""
        if m.get("attribution_agrees") is False:
            note += f"; attribution differs: {m.get('attribution_mismatch') or '?'}"
        rows.append([Cell(t) for t in _row(p.server, p.point_key, "all", agg, note.strip("; "))])
        keys.append(f"{p.server}|{p.point_key}")
    if not rows:
        return None
    sims = all(p.modelled for p in as_points(points))  # the wall column is the sim's pacing, named so
    header = [f"wall {h}" if sims and h.startswith("TTFT") else h for h in HEADER]
    return Table("workers", header, rows, keys, "Replicas: every worker")


def worker_lines(points: Points) -> list[str]:
    """The table as Markdown lines ([] when no point ran replicas)."""
    t = worker_table(points)
    if t is None:
        return []
    out = ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    out += ["| " + " | ".join(r) + " |" for r in t.texts()]
    return out
