"""One timeline chart per point on the page: what the server did over time (its /metrics timeline, first
seed): token usage and host pool use in %, requests running and queued, tokens evicted, loaded back and
backed up per second (harness.summarize.funnel keeps the thinned series in `points[].metrics_timeline`)."""

from __future__ import annotations

from typing import Any

LINES = (
    ("token_usage_pct", "token usage (%)"),
    ("host_used_pct", "host pool used (%)"),
    ("running", "running requests"),
    ("queued", "queued requests"),
    ("evicted_per_s", "evicted tokens/s (/100)"),
    ("load_back_per_s", "loaded back tokens/s (/100)"),
    ("backup_per_s", "backed up tokens/s (/100)"),
)


def timeline_charts(exp: str, nodes: list[tuple[str, list[Any]]]) -> list[Any]:
    """A chart per point whose summary holds a timeline (harness.report.chart_data's Chart shape)."""
    out: list[dict[str, Any]] = []
    for node, pts in nodes:
        for p in pts:
            tl: Any = getattr(p, "metrics_timeline", None) or {}
            if not tl:
                continue
            seed = sorted(tl, key=lambda s: (len(s), s))[0]
            s = tl[seed]
            xs = [float(t) for t in s.get("t_s") or []]
            series: list[dict[str, Any]] = []
            for key, label in LINES:
                ys = s.get(key)
                if not ys or not any(v for v in ys if v is not None):
                    continue
                series.append(
                    {
                        "label": label,
                        "y": list(ys),
                        "lo": [None] * len(xs),
                        "hi": [None] * len(xs),
                        "status": "",
                    }
                )
            if xs and series:
                where = f"{node} " if len(nodes) > 1 else ""
                out.append(
                    {
                        "id": "",
                        "kind": "timeline",
                        "title": f"{exp}: {where}{p.server} {p.point_key} seed {seed}: the server over time",
                        "x_label": "time since the point began (s)",
                        "y_label": "% / requests / hundreds of tokens per s",
                        "x_log": False,
                        "x": xs,
                        "series": series,
                    }
                )
    return out
