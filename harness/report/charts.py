"""PNG charts of a summary (matplotlib, Agg backend: no display needed).

Every chart has a title, axis labels with units and a caption naming experiment, node and date.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter  # noqa: E402

from harness.report.anatomy import anatomy_chart
from harness.report.common import (  # noqa: E402
    as_points,
    server_card,
    server_policy,
    server_pool,
    server_time_scale,
)
from harness.report.tool_gap import tool_gap_chart
from harness.summary import Point, Server, Summary, parse_summary  # noqa: E402

Points = Iterable[Point | Mapping[str, Any]]  # records, or the JSON objects tests build


def _servers(summary: Summary, exp: str) -> dict[str, Server]:
    entry = summary.experiments.get(exp)
    return entry.servers if entry else {}


def _caption(fig: Any, summary: Summary, exp: str) -> None:
    """Experiment, node and date (the run's start from the manifest, else when the summary was made)."""
    entry = summary.experiments.get(exp)
    start = entry.manifest.get("start_time") if entry else None
    date = str(start or summary.generated_at or "?")[:10]
    fig.text(0.01, 0.01, f"experiment {exp} · node {summary.node} · {date}", fontsize=8, color="0.3")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finish(
    fig: Any,
    ax: Any,
    drawn: bool,
    summary: Summary,
    exp: str,
    path: Path,
    labels: tuple[str, str, str],
    legend_size: int | None = 7,
    grid: str = "major",
) -> Path | None:
    """Labels (title, x, y), grid, legend, caption, saved: what every chart ends with; None if it drew nothing."""
    if not drawn:
        plt.close(fig)
        return None
    title, xlabel, ylabel = labels
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which=grid, alpha=0.3)
    ax.legend(fontsize=legend_size)
    _caption(fig, summary, exp)
    return _save(fig, path)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _modelled_p50(p: Point | None, fig_of_seed: Any = None) -> float | None:
    m = fig_of_seed.modelled if fig_of_seed is not None else (p.modelled if p else None)
    return m.ttft_ms.p50 if m is not None and m.ttft_ms is not None else None


def _ttft_ms(p: Point, modelled: bool) -> float | None:
    """A point's median TTFT in ms: the sim's modelled p50 (its own clock) or the wall-clock median."""
    if modelled:
        return _modelled_p50(p)
    v = p.median.ttft_median_s
    return v * 1000 if isinstance(v, int | float) else None


def _ttft_spread_ms(p: Point, modelled: bool) -> tuple[float, float] | None:
    """min and max over the point's ok seeds, in ms."""
    if not modelled:
        got = p.spread.get("ttft_median_s")
        lo, hi = got if isinstance(got, list) and len(got) == 2 else (None, None)
        return (lo * 1000, hi * 1000) if isinstance(lo, int | float) and isinstance(hi, int | float) else None
    vals = [
        v
        for s in p.seeds.values()
        if s.status == "ok" and isinstance(v := _modelled_p50(None, s.figures), int | float)
    ]
    return (min(vals), max(vals)) if vals else None


def _x(p: Point, key: str) -> float | None:
    v = p.sweep.get(key)
    return v if isinstance(v, int | float) else None


def ttft_vs_prompts(summary: Any, exp: str, points: Points, path: Path) -> Path | None:
    """Median TTFT against the number of distinct prompts (groups), log x, one line per server, seed spread shaded."""
    s, points = parse_summary(summary), as_points(points)
    xs_key = "groups" if any("groups" in p.sweep for p in points) else None
    if xs_key is None:
        return None
    # a sim's modelled time (its own clock) when every point has it; else wall clock, said so for a sim
    modelled = all(isinstance(_ttft_ms(p, True), int | float) for p in points)
    servers = _servers(s, exp)
    scales = sorted({sc for p in points if (sc := server_time_scale(servers.get(p.server)))})
    cards = sorted({c for p in points if (c := server_card(servers.get(p.server)))})
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = False
    for server in sorted({p.server for p in points}):
        rows = sorted(
            (
                (xv, yv, p)
                for p in points
                if p.server == server
                and (xv := _x(p, xs_key)) is not None
                and isinstance(yv := _ttft_ms(p, modelled), int | float)
            ),
            key=lambda r: r[0],
        )
        if not rows:
            continue
        x, y, pts = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
        spreads = [sp for p in pts if (sp := _ttft_spread_ms(p, modelled)) is not None]
        (line,) = ax.plot(x, y, marker="o", label=server)
        if len(spreads) == len(pts):  # a band only when every point has one
            ax.fill_between(
                x, [sp[0] for sp in spreads], [sp[1] for sp in spreads], alpha=0.2, color=line.get_color()
            )
        for xi, yi, p in zip(x, y, pts, strict=True):
            if p.status != "ok":
                ax.annotate(p.status or "", (xi, yi), fontsize=7, color="red")
        drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(sorted({xv for p in points if (xv := _x(p, xs_key)) is not None}))
    ylabel, note = "median TTFT (ms)", ""
    if modelled:
        ylabel = "modelled median TTFT (ms)"
        note = f"modelled time of the {', '.join(cards) or 'modelled'} card on the sim's own clock, not wall clock"
    elif scales:
        ylabel = "median TTFT (ms, wall clock)"
        scale = scales[0]
        note = f"wall clock of a sim at --time-scale {scale:g} ({1 / scale:g}× faster than the modelled card)"
    if drawn and note:
        ax.text(0.01, 0.98, note, transform=ax.transAxes, fontsize=8, va="top", color="darkred")
    labels = (
        f"{exp}: median TTFT vs distinct prompts (shaded: min–max over seeds)",
        "distinct prompts (shared-prefix groups, log scale)",
        ylabel,
    )
    return _finish(fig, ax, drawn, s, exp, path, labels, legend_size=None, grid="both")


def hit_rate_per_turn(summary: Any, exp: str, points: Points, path: Path) -> Path | None:
    """Usage hit rate per turn, one line per policy x pool (server), per point when there are several."""
    s, pts_ = parse_summary(summary), as_points(points)
    servers = _servers(s, exp)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = False
    multi = len({p.point_key for p in pts_}) > 1
    agent = bool(pts_) and all(p.workload_kind == "agent" for p in pts_)  # `turn` is the step depth
    for p in sorted(pts_, key=lambda p: (p.server, p.point_key)):
        by_turn = p.median.hit_rate_usage_by_turn or {}
        pts = sorted((int(t), v) for t, v in by_turn.items() if isinstance(v, int | float))
        if not pts:
            continue
        entry = servers.get(p.server)
        label = f"{server_policy(entry)} · pool {server_pool(entry)} ({p.server})"
        if multi:
            label += f" {p.point_key}"
        if p.status != "ok":
            label += f" [{p.status}]"
        ax.plot([t if agent else t + 1 for t, _ in pts], [v * 100 for _, v in pts], marker="o", label=label)
        drawn = True
    ax.set_ylim(0, 100)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    labels = (
        f"{exp}: prefix-cache hit rate per {'step depth' if agent else 'turn'}",
        "step depth (0 = a session's first step)" if agent else "turn (1 = first request of each session)",
        "hit rate: cached / prompt tokens (%)",
    )
    return _finish(fig, ax, drawn, s, exp, path, labels)


def sm_clock(summary: Any, exp: str, points: Points, path: Path) -> Path | None:
    """SM clock over each point's run (first seed with samples), one line per server x point."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = False
    for p in sorted(as_points(points), key=lambda p: (p.server, p.point_key)):
        series = p.clock_series
        if not series:
            continue
        seed = sorted(series, key=lambda s: (len(s), s))[0]
        cs = series[seed]
        ax.plot(cs.t_s, cs.sm_clock_mhz, label=f"{p.server} {p.point_key} seed {seed}", linewidth=1)
        drawn = True
    labels = (
        f"{exp}: SM clock during each point",
        "time since the point's first sample (s)",
        "SM clock (MHz)",
    )
    return _finish(fig, ax, drawn, parse_summary(summary), exp, path, labels)


def workers(summary: Any, exp: str, points: Points, path: Path) -> Path | None:
    """Replicas points: each worker's hit rate and share of the prefill work, bars grouped by server x point,
    so a routing policy's hits show beside the skew it cost."""
    pts_ = [p for p in as_points(points) if p.median.get("workers")]
    if not pts_:
        return None
    pts_.sort(key=lambda p: (p.server, p.point_key))
    multi = len({p.point_key for p in pts_}) > 1
    names = sorted({w for p in pts_ for w in p.median.get("workers") or {}})
    wide = max(8.0, 0.55 * len(pts_) * max(1, len(names)) ** 0.5 + 2)  # a bar group per server x point
    fig, (ax_hit, ax_share) = plt.subplots(2, 1, figsize=(wide, 7.4), sharex=True)
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(pts_))]
        for ax, key in ((ax_hit, "hit_rate_usage"), (ax_share, "prefill_share")):
            vals = [((p.median.get("workers") or {}).get(name) or {}).get(key) for p in pts_]
            ax.bar(xs, [v * 100 if isinstance(v, int | float) else 0 for v in vals], width, label=name)
    labels = [f"{p.server}\n{p.point_key}" if multi else p.server for p in pts_]
    for ax, title, ylabel in (
        (ax_hit, "hit rate per worker", "hit rate (%)"),
        (ax_share, "share of the prefill work (dashes: an even split)", "prefill share (%)"),
    ):
        ax.set_ylim(0, 100)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{exp}: {title}", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    for j, p in enumerate(pts_):  # each point's even split: 1 / its own worker count
        n = len(p.median.get("workers") or {})
        ax_share.hlines(100 / n, j - 0.45, j + 0.45, colors="0.3", linestyles="--", linewidth=1)
    ax_share.set_xticks(range(len(pts_)), labels, fontsize=8, rotation=35, ha="right")
    ax_hit.legend(fontsize=7, ncol=len(names), loc="upper right")
    _caption(fig, parse_summary(summary), exp)
    return _save(fig, path)


def draw_all(summary: Any, out: Path, stem: str) -> dict[str, list[Path]]:
    """Every chart that the data supports, per experiment."""
    summary = parse_summary(summary)
    out = Path(out)
    result: dict[str, list[Path]] = {}
    for exp in sorted(summary.experiments):
        pts = [p for p in summary.points if p.experiment == exp]
        if not pts:
            continue
        base = out / f"{stem}-{_safe(exp)}"
        made = [
            ttft_vs_prompts(summary, exp, pts, Path(f"{base}-ttft.png")),
            hit_rate_per_turn(summary, exp, pts, Path(f"{base}-hit-rate-per-turn.png")),
            sm_clock(summary, exp, pts, Path(f"{base}-sm-clock.png")),
            workers(summary, exp, pts, Path(f"{base}-workers.png")),
            anatomy_chart(pts, Path(f"{base}-miss-anatomy.png"), f"{exp}: prompt tokens by miss class"),
            tool_gap_chart(
                pts, Path(f"{base}-tool-gap.png"), f"{exp}: prompt tokens by tier against the tool gap"
            ),
        ]
        result[exp] = [m for m in made if m is not None]
    return result
