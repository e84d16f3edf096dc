"""The report's cached tokens by tier (device, host, storage), as shares of the prompt tokens, with what the
host and storage hits cost to copy onto the device, whether each source's split adds up and how the point
began cold; only for points whose server gave a split."""

from __future__ import annotations

from typing import Any

from harness.report.common import as_points, point_order
from harness.report.tables import Cell, Points, Table, pct

TIERS = ("device", "host", "storage")


def _source(m: Any) -> str | None:
    """Where the split comes from: the usage where any request gave one, else the server's counters by
    `cache_source` (an OpenAI API's usage has no tier split; SGLang's counters do)."""
    if any(m.get(f"cached_{t}_tokens") is not None for t in TIERS):
        return "usage"
    if any(m.get(f"counter_cached_{t}_tokens") is not None for t in TIERS):
        return "counters"
    return None


def _share(m: Any, tier: str) -> str:
    v = m.get(f"{'counter_' if _source(m) == 'counters' else ''}cached_{tier}_tokens")
    prompt = m.get("prompt_tokens")
    return (
        pct(v / prompt) if isinstance(v, int | float) and isinstance(prompt, int | float) and prompt else "-"
    )


def _seconds(m: Any) -> str:
    """The host and storage hits' copy seconds ("-" where the card or the tier is unknown)."""
    vals = [m.get(f"{t}_tier_seconds") for t in ("host", "storage")]
    return " / ".join(f"{v:.3g}" if isinstance(v, int | float) else "-" for v in vals)


def _adds_up(v: Any) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def tier_table(points: Points) -> Table | None:
    """One row per point with a usage or counter split; None when no point has one."""
    header = [
        "server",
        "point",
        "device %",
        "host %",
        "storage %",
        "copy s (host / storage)",
        "adds up (usage / counters)",
        "cold start",
        "split from",
    ]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(as_points(points), key=point_order):
        m = p.median
        source = _source(m)
        if source is None and m.get("tiers_add_up_counters") is None:
            continue
        adds = f"{_adds_up(m.get('tiers_add_up_usage'))} / {_adds_up(m.get('tiers_add_up_counters'))}"
        texts = [
            p.server,
            p.point_key,
            *(_share(m, t) for t in TIERS),
            _seconds(m),
            adds,
            m.get("cold_start") or "-",
            {"usage": "usage", "counters": "counters (cache_source)"}.get(source or "", "-"),
        ]
        rows.append([Cell(t) for t in texts])
        keys.append(f"{p.server}|{p.point_key}")
    if not rows:
        return None
    return Table("tiers", header, rows, keys, "Cached tokens by tier")


def tier_lines(points: Points) -> list[str]:
    """The table as Markdown lines ([] when no point has a split)."""
    t = tier_table(points)
    if t is None:
        return []
    out = ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    out += ["| " + " | ".join(r) + " |" for r in t.texts()]
    return out
