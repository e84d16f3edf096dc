"""Chart series for the HTML page, as plain data: x values, and per series median y with seed min/max.

Each node is a list of points; with several nodes (a comparison) every series is named `node · server`,
so one chart holds one series per node and server. The browser draws them (assets/report.js, uPlot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict

from harness.report.common import as_points
from harness.report.tables import layout
from harness.report.timeline_chart import timeline_charts
from harness.summary import Point
from harness.summary.figures import ClockSeries, Modelled


class Series(TypedDict):
    label: str
    y: list[float | None]
    lo: list[float | None]
    hi: list[float | None]
    status: str


class Chart(TypedDict):
    id: str
    kind: str
    title: str
    x_label: str
    y_label: str
    x_log: bool
    x: list[float]
    series: list[Series]


NodePoints = list[tuple[str, list[Point]]]  # (node name, that node's points of one experiment)


def _label(node: str, many_nodes: bool, *parts: str) -> str:
    return " · ".join(([node] if many_nodes else []) + [p for p in parts if p])


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _spread(p: Point, fig: str, key: str | None = None) -> tuple[Any, Any]:
    s = p.spread.get(fig)
    if key is not None:
        s = s.get(key) if isinstance(s, dict) else None
    return (s[0], s[1]) if isinstance(s, list) and len(s) == 2 else (None, None)


def _scaled(v: Any, k: float) -> float | None:
    x = _num(v)
    return None if x is None else x * k


def _groups(p: Point) -> float | None:
    g = p.sweep.get("groups")
    return float(g) if isinstance(g, int | float) else None


def _groups_axis(nodes: NodePoints, keep: Callable[[Point], bool] = lambda p: True) -> list[float]:
    """The x axis of a per-groups chart: every numeric sweep.groups value of the points `keep` accepts."""
    return sorted({g for _, pts in nodes for p in pts if keep(p) and (g := _groups(p)) is not None})


def _by_groups(pts: list[Point], server: str) -> dict[float, Point]:
    """One server's points keyed by their numeric sweep.groups value."""
    return {g: p for p in pts if p.server == server and (g := _groups(p)) is not None}


def ttft_vs_prompts(exp: str, nodes: NodePoints) -> Chart | None:
    """Median TTFT (wall clock) per groups value, one series per node × server; log x."""
    many = len(nodes) > 1
    xs = _groups_axis(nodes)
    if not xs:
        return None
    series: list[Series] = []
    for node, pts in nodes:
        for server in sorted({p.server for p in pts}):
            by_x = _by_groups(pts, server)
            if not any(_num(p.median.ttft_median_s) is not None for p in by_x.values()):
                continue
            row: Series = {"label": _label(node, many, server), "y": [], "lo": [], "hi": [], "status": ""}
            bad = []
            for x in xs:
                p = by_x.get(x)
                lo, hi = _spread(p, "ttft_median_s") if p else (None, None)
                row["y"].append(_scaled(p.median.ttft_median_s, 1000) if p else None)
                row["lo"].append(_scaled(lo, 1000))
                row["hi"].append(_scaled(hi, 1000))
                if p and p.status != "ok":
                    bad.append(f"{x:g}: {p.status}")
            row["status"] = "; ".join(bad)
            series.append(row)
    if not series:
        return None
    return {
        "id": "",
        "kind": "ttft",
        "title": f"{exp}: median TTFT vs distinct prompts (whiskers: min–max over seeds)",
        "x_label": "distinct prompts (shared-prefix groups, log scale)",
        "y_label": "median TTFT (ms, wall clock)",
        "x_log": True,
        "x": xs,
        "series": series,
    }


def _modelled_p50(m: Modelled | None) -> float | None:
    return m.ttft_ms.p50 if m is not None and m.ttft_ms is not None else None


def _modelled_ttft(p: Point) -> tuple[float | None, float | None, float | None]:
    """A sim point's modelled median TTFT (ms, the card's time from the sim's clock) and its min/max over
    the seeds the median was taken over (ok seeds, else all)."""
    ok = [s for s in p.seeds.values() if s.status == "ok"] or list(p.seeds.values())
    vals = [v for s in ok if (v := _modelled_p50(s.figures.modelled)) is not None]
    return _num(_modelled_p50(p.modelled)), (min(vals) if vals else None), (max(vals) if vals else None)


def ttft_modelled(exp: str, nodes: NodePoints) -> Chart | None:
    """Sim points only: the modelled card's median TTFT per groups value, from the sim's virtual clock."""
    many = len(nodes) > 1
    xs = _groups_axis(nodes, lambda p: p.modelled is not None)
    if not xs:
        return None
    series: list[Series] = []
    for node, pts in nodes:
        for server in sorted({p.server for p in pts if p.modelled}):
            by_x = _by_groups(pts, server)
            row: Series = {"label": _label(node, many, server), "y": [], "lo": [], "hi": [], "status": ""}
            for x in xs:
                med, lo, hi = _modelled_ttft(by_x[x]) if x in by_x else (None, None, None)
                row["y"].append(med)
                row["lo"].append(lo)
                row["hi"].append(hi)
            if any(v is not None for v in row["y"]):
                series.append(row)
    if not series:
        return None
    return {
        "id": "",
        "kind": "ttft-modelled",
        "title": f"{exp}: modelled median TTFT vs distinct prompts (the card's time, from the sim's clock)",
        "x_label": "distinct prompts (shared-prefix groups, log scale)",
        "y_label": "modelled median TTFT (ms)",
        "x_log": True,
        "x": xs,
        "series": series,
    }


def hit_rate_by(exp: str, nodes: NodePoints, by: str) -> Chart | None:
    """Usage hit rate per turn (`by`="turn") or per prefix use (`by`="position"), one series per point."""
    fig = f"hit_rate_usage_by_{by}"
    many = len(nodes) > 1
    keys = sorted({int(k) for _, pts in nodes for p in pts for k in (p.median.get(fig) or {})})
    if len(keys) < 2:
        return None
    series: list[Series] = []
    for node, pts in nodes:
        multi = len({p.point_key for p in pts}) > 1
        for p in sorted(pts, key=lambda p: (p.server, _point_rank(p))):
            vals = p.median.get(fig) or {}
            if not any(_num(v) is not None for v in vals.values()):
                continue
            los, his = [], []
            for k in keys:
                lo, hi = _spread(p, fig, str(k))
                los.append(_scaled(lo, 100))
                his.append(_scaled(hi, 100))
            series.append(
                {
                    "label": _label(node, many, p.server, p.point_key if multi else ""),
                    "y": [_scaled(vals.get(str(k)), 100) for k in keys],
                    "lo": los,
                    "hi": his,
                    "status": "" if p.status == "ok" else str(p.status),
                }
            )
    if not series:
        return None
    what = "turn (1 = first request of each session)" if by == "turn" else "use of a prefix (1 = first use)"
    agent = by == "turn" and all(p.workload_kind == "agent" for _, pts in nodes for p in pts)
    if agent:  # an agent's `turn` is its step depth: the earlier exchanges its context holds
        what, by = "step depth (0 = a session's first step)", "step depth"
    return {
        "id": "",
        "kind": "hit-rate-turn" if agent else f"hit-rate-{by}",
        "title": f"{exp}: prefix-cache hit rate (cached / prompt tokens) per {by} (whiskers: min–max over seeds)",
        "x_label": what,
        "y_label": "hit rate (%)",
        "x_log": False,
        "x": [float(k if agent else k + 1) for k in keys],
        "series": series,
    }


def sm_clock(exp: str, nodes: NodePoints) -> Chart | None:
    """SM clock over each point's run (first seed with samples), one series per point; x = seconds."""
    many = len(nodes) > 1
    picked: list[tuple[str, Point, ClockSeries]] = []
    for node, pts in nodes:
        for p in sorted(pts, key=lambda p: (p.server, _point_rank(p))):
            cs = p.clock_series
            if not cs:
                continue
            seed = sorted(cs, key=lambda s: (len(s), s))[0]
            picked.append((_label(node, many, p.server, p.point_key, f"seed {seed}"), p, cs[seed]))
    if not picked:
        return None
    xs = sorted({round(float(t), 3) for _, _, s in picked for t in s.t_s})
    index = {x: i for i, x in enumerate(xs)}
    series: list[Series] = []
    for label, p, s in picked:
        y: list[float | None] = [None] * len(xs)
        for t, v in zip(s.t_s, s.sm_clock_mhz, strict=False):
            y[index[round(float(t), 3)]] = _num(v)
        series.append(
            {
                "label": label,
                "y": y,
                "lo": [None] * len(xs),
                "hi": [None] * len(xs),
                "status": "" if p.status == "ok" else str(p.status),
            }
        )
    return {
        "id": "",
        "kind": "sm-clock",
        "title": f"{exp}: SM clock during each point",
        "x_label": "time since the point's first sample (s)",
        "y_label": "SM clock (MHz)",
        "x_log": False,
        "x": xs,
        "series": series,
    }


def _point_rank(p: Point) -> tuple[Any, ...]:
    return tuple((0, v) if isinstance(v, int | float) else (1, str(v)) for v in p.sweep.values())


def experiment_charts(
    exp: str, points: Iterable[tuple[str, Iterable[Point | Mapping[str, Any]]]]
) -> list[Chart]:
    """Every chart the data supports: TTFT vs prompts (wall clock, and the sim's modelled card time),
    hit rate per turn (else per position), SM clock. `points`: (node, its points of `exp`) per node."""
    nodes: NodePoints = [(node, as_points(pts)) for node, pts in points]
    all_pts = [p for _, pts in nodes for p in pts]
    made = [ttft_vs_prompts(exp, nodes), ttft_modelled(exp, nodes)]
    turn = hit_rate_by(exp, nodes, "turn") if layout(all_pts) == "policy" else None
    made.append(turn or hit_rate_by(exp, nodes, "position"))
    made.append(sm_clock(exp, nodes))
    charts = [c for c in made if c is not None] + timeline_charts(exp, nodes)  # one per point
    for i, c in enumerate(charts):
        c["id"] = f"chart-{_safe(exp)}-{c['kind']}-{i}"
    return charts


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
