"""The report's HiCache tier funnel table and health verdict lines (summary `hicache_funnel`, `health`)."""

from __future__ import annotations

import re
from html import escape
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
    ("L3 not prefetched", "storage_unfulfilled_tokens"),
    ("L3 deferred", "storage_deferred_tokens"),
    ("L3 backups dropped", "storage_backup_dropped_tokens"),
    ("L3 hits", "storage_hit_tokens"),
)


def _n(v: Any) -> str:
    return f"{v:,.0f}" if isinstance(v, int | float) and not isinstance(v, bool) else "-"


def health_lines(points: list[Any]) -> list[str]:
    """Markdown: the funnel per HiCache point x seed (tokens), then each health verdict with its window."""
    rows: list[str] = []
    notes: list[str] = []
    for p in points:
        for seed, f in sorted((getattr(p, "hicache_funnel", None) or {}).items()):
            rows.append(
                f"| {p.server} | {p.point_key} | {seed} | "
                + " | ".join(_n(f.get(k)) for _, k in FUNNEL)
                + " |"
            )
            if reasons := f.get("storage_unfulfilled_by_reason"):  # SGLang's reasons, under the table
                why = ", ".join(f"{_n(v)} {r}" for r, v in sorted(reasons.items()))
                notes.append(f"- {p.server} `{p.point_key}` seed {seed}: L3 not prefetched by reason: {why}")
    out: list[str] = []
    if rows:
        out += ["### HiCache tier funnel (tokens)", ""]
        out += ["| server | point | seed | " + " | ".join(h for h, _ in FUNNEL) + " |"]
        out += ["|---|---|---|" + "---:|" * len(FUNNEL), *rows, ""]
        out += [*notes, ""] if notes else []
    verdicts = [(p, v) for p in points for v in getattr(p, "health", None) or []]
    gaps = not_judged_lines(points)
    if verdicts or gaps:
        out += ["### Health", ""]
        for p, v in verdicts:
            w = v.get("window_s")
            when = f" ({w[0]:.1f}-{w[1]:.1f} s)" if w else ""
            basis = f" [{v['evidence']}]" if v.get("evidence") else ""
            out.append(
                f"- **{v['verdict']}** {p.server} `{p.point_key}` seed {v['seed']}{when}: {v['reason']}{basis}"
            )
        out += [f"- {line}" for line in gaps]
        out.append("")
    return out


def not_judged_lines(points: list[Any]) -> list[str]:
    """One line per point x seed x verdict that could not be judged: "not judged: **verdict** ...: why".

    Why: a point with no health verdict is healthy only where each verdict could be judged on it."""
    out = []
    for p in points:
        for g in getattr(p, "not_judged", None) or []:
            out.append(
                f"not judged: **{g['verdict']}** {p.server} `{p.point_key}` seed {g['seed']}: {g['why']}"
            )
    return out


def health_html(points: list[Any]) -> str:
    """The page's health block: each verdict and each verdict not judged, as the .md says them."""
    lines = health_lines(points)
    if "### Health" not in lines:
        return ""
    items = [ln[2:] for ln in lines[lines.index("### Health") + 2 :] if ln.startswith("- ")]
    body = "".join(f"<li>{_inline(i)}</li>" for i in items)
    return f'<h3>Health</h3><ul class="problems health">{body}</ul>'


def _inline(text: str) -> str:
    """The .md line's **bold** and `code` as HTML, the rest escaped."""
    out = escape(text, quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)
