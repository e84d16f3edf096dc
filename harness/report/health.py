"""The report's HiCache tier funnel table and health verdict lines (summary `hicache_funnel`, `health`)."""

from __future__ import annotations

from typing import Any

FUNNEL = (
    ("backed up", "backed_up_tokens"),
    ("evicted", "evicted_tokens"),
    ("dropped", "dropped_tokens"),
    ("host let go", "host_released_tokens"),
    ("L3 written", "storage_written_tokens"),
    ("returning off device", "returning_off_device_tokens"),
    ("host hits", "host_hit_tokens"),
    ("loaded back", "loaded_back_tokens"),
    ("L3 prefetched", "storage_prefetched_tokens"),
    ("L3 hits", "storage_hit_tokens"),
)


def _n(v: Any) -> str:
    return f"{v:,.0f}" if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def health_lines(points: list[Any]) -> list[str]:
    """Markdown: the funnel per HiCache point x seed (tokens), then each health verdict with its window."""
    rows = []
    for p in points:
        for seed, f in sorted((getattr(p, "hicache_funnel", None) or {}).items()):
            rows.append(
                f"| {p.server} | {p.point_key} | {seed} | "
                + " | ".join(_n(f.get(k)) for _, k in FUNNEL)
                + " |"
            )
    out: list[str] = []
    if rows:
        out += ["### HiCache tier funnel (tokens)", ""]
        out += ["| server | point | seed | " + " | ".join(h for h, _ in FUNNEL) + " |"]
        out += ["|---|---|---|" + "---:|" * len(FUNNEL), *rows, ""]
    verdicts = [(p, v) for p in points for v in getattr(p, "health", None) or []]
    if verdicts:
        out += ["### Health", ""]
        for p, v in verdicts:
            w = v.get("window_s")
            when = f" ({w[0]:.1f}-{w[1]:.1f} s)" if w else ""
            out.append(
                f"- **{v['verdict']}** {p.server} `{p.point_key}` seed {v['seed']}{when}: {v['reason']}"
            )
        out.append("")
    return out
