"""What `harness whatif --replicas` shows: the per-policy table, the per-worker table, hit rate vs replicas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.whatif.fleet import FleetResult
from harness.whatif.inputs import Trace


def routing_entry(
    path: Path, trace: Trace, notes: list[str], results: list[FleetResult], slo_ms: float | None
) -> dict[str, Any]:
    """One input's part of whatif.json and of `--json` for a routing grid."""
    return {
        "input": str(path),
        "requests": len(trace.requests),
        "unit": trace.kind,
        "concurrency": trace.concurrency,
        "notes": notes,
        "routing": [r.to_dict(slo_ms) for r in results],
    }


def _l3(r: FleetResult) -> str:
    c = r.config
    if not c.storage:
        return "-" if not c.host_ratio else f"host {c.host_ratio:g}x"
    return f"{c.storage} {'shared' if r.shared_l3 else 'own'}"


def print_routing(trace: Trace, results: list[FleetResult], notes: list[str], slo_ms: float | None) -> None:
    """The per-policy table (one row per case), then every worker of each case."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    unit = "blocks" if trace.kind == "blocks" else "tokens"
    how = (
        f"the sim's scheduler at concurrency {trace.concurrency}, per worker"
        if trace.concurrency is not None
        else "one request at a time"
    )
    t = Table(
        title=f"{trace.name}: {len(trace.requests)} requests routed by smg's policies ({how})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    cols = [
        "router",
        "replicas",
        "policy",
        f"pool\n{unit}",
        "L3",
        "hit %",
        "dev/host/L3\nhit %",
        "load\nskew",
        "TTFT ms\np50/p99",
    ]
    if slo_ms is not None:
        cols += [f"TTFT<={slo_ms:g}ms", "goodput\nreq/s"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("router", "policy", "L3") else "right")
    for r in results:
        a = r.aggregate
        p = max(a.prompt_tokens, 1)
        row = [
            r.router.policy,
            str(r.replicas),
            r.config.policy,
            f"{r.config.pool:,}",
            _l3(r),
            f"{a.hit_rate:.1%}",
            f"{100 * a.device_hit_tokens / p:.1f}/{100 * a.host_hit_tokens / p:.1f}/{100 * a.storage_hit_tokens / p:.1f}",
            f"{r.load_skew:.2f}",
            f"{a.ttft_ms['p50']:.0f}/{a.ttft_ms['p99']:.0f}",
        ]
        if slo_ms is not None:
            g = r.goodput_rps(slo_ms)
            row += [f"{r.slo_met(slo_ms):.0%}", "-" if g is None else f"{g:.2f}"]
        t.add_row(*row)
    import sys

    console = Console() if sys.stdout.isatty() else Console(width=200)  # piped: every column whole
    console.print(t)
    w = Table(
        title="every worker: hit % / prefill share / TTFT p50 ms",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    n_max = max((r.replicas for r in results), default=1)
    for col in ["router", "replicas", "pool", "L3", *[f"w{i}" for i in range(n_max)]]:
        w.add_column(col, justify="left" if col in ("router", "L3") else "right")
    for r in results:
        if r.replicas < 2:
            continue
        total = max(sum(f.prefill_tokens for f in r.workers), 1)
        cells = [
            f"{f.hit_rate:.0%} / {f.prefill_tokens / total:.0%} / {f.ttft_ms['p50']:.0f}" for f in r.workers
        ]
        w.add_row(
            r.router.policy,
            str(r.replicas),
            f"{r.config.pool:,}",
            _l3(r),
            *cells,
            *[""] * (n_max - len(cells)),
        )
    if w.row_count:
        console.print(w)
    console.print(
        f"replayed {len(results)} cases in {sum(r.aggregate.seconds for r in results):.2f} s", style="dim"
    )
    for n in notes:
        console.print(f"[yellow]note:[/yellow] {n}")


def draw_routing_chart(trace: Trace, results: list[FleetResult], path: Path) -> None:
    """Hit rate against replicas, one line per policy (x pool x L3 sharing), load skew as marker labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    fig, ax = plt.subplots(figsize=(7, 4.5))
    lines: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
    many_pools = len({r.config.pool for r in results}) > 1
    for r in results:
        tail = (f" pool {r.config.pool:,}" if many_pools else "") + ("" if _l3(r) == "-" else f" {_l3(r)}")
        lines.setdefault((r.router.policy, tail), []).append((r.replicas, r.aggregate.hit_rate, r.load_skew))
    for (pol, tail), pts in lines.items():
        pts.sort()
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            linestyle="--" if "shared" in tail else "-",
            label=pol + tail,
        )
        for x, y, skew in pts:
            if skew >= 1.5:
                ax.annotate(f"{skew:.1f}x", (x, y), fontsize=7, textcoords="offset points", xytext=(3, 3))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r.replicas for r in results}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("replicas behind smg")
    ax.set_ylabel(f"prefix hit rate, % of prompt {'blocks' if trace.kind == 'blocks' else 'tokens'}")
    ax.set_title(f"{trace.name}: hit rate vs replicas (labels: load skew >= 1.5x)")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
