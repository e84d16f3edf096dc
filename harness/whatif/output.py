"""What a what-if run shows: rich tables on the terminal, a hit-rate-vs-pool chart, results.json entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.whatif.inputs import Trace
from harness.whatif.replay import Result


def results_entry(path: Path, trace: Trace, notes: list[str], results: list[Result]) -> dict[str, Any]:
    """One input's part of whatif.json and of `--json`."""
    return {
        "input": str(path),
        "requests": len(trace.requests),
        "unit": trace.kind,
        "concurrency": trace.concurrency,
        "notes": notes,
        "results": [r.to_dict() for r in results],
    }


WRITE_SHORT = {"write_through": "wt", "write_through_selective": "wts", "write_back": "wb"}


def print_tables(trace: Trace, results: list[Result], notes: list[str]) -> None:
    """The results table, then hit rate per turn and per session position where the input has them."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    unit = "blocks" if trace.kind == "blocks" else "tokens"
    how = (
        f"the sim's scheduler at concurrency {trace.concurrency}"
        if trace.concurrency is not None
        else "one request at a time"
    )
    t = Table(
        title=f"{trace.name}: {len(trace.requests)} requests ({how})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in (
        "policy",
        f"pool\n{unit}",
        "host\ntier",
        "hit %\n(ideal)",
        "dev/host(/L3)\nhit %",
        f"evicted\n{unit}",
        f"loaded\nback {unit}",
        "TTFT ms\np50/p99",
    ):
        t.add_column(col, justify="left" if col == "policy" else "right", overflow="fold")
    turns = sorted({k for r in results for k in r.per_turn})
    for r in results:
        c = r.config
        host = (
            "-"
            if c.host_ratio == 0
            else f"{c.host_ratio:g}x {WRITE_SHORT.get(c.write_policy, c.write_policy)}"
            + (f" +L3 {c.storage}" if c.storage else "")
        )
        t.add_row(
            c.policy,
            f"{c.pool:,}",
            host,
            f"{r.hit_rate:.1%} ({r.ideal_rate:.1%})",
            f"{100 * r.device_hit_tokens / max(r.prompt_tokens, 1):.1f}/"
            f"{100 * r.host_hit_tokens / max(r.prompt_tokens, 1):.1f}"
            + (f"/{100 * r.storage_hit_tokens / max(r.prompt_tokens, 1):.1f}" if c.storage else ""),
            f"{r.evicted_tokens:,}",
            f"{r.load_back_tokens:,}",
            f"{r.ttft_ms['p50']:.0f}/{r.ttft_ms['p99']:.0f}",
        )
    console = Console()
    console.print(t)
    console.print(
        f"replayed {len(results)} configurations in {sum(r.seconds for r in results):.2f} s", style="dim"
    )
    if len(turns) > 1:
        console.print(
            _hit_rate_table(
                "hit rate per turn, % (ideal in brackets)", results, "per_turn", "turn ", turns, 1
            )
        )
    positions = sorted({k for r in results for k in r.per_position})
    if positions and any(r.group is not None for r in trace.requests):
        shown = positions if len(positions) <= 12 else positions[:11] + positions[-1:]
        title = "hit rate per session position, % (ideal): p<n> = the group's prefix was sent n times before"
        console.print(_hit_rate_table(title, results, "per_position", "p", shown))
    classes = sorted({k for r in results for k in r.per_class})
    if classes:
        console.print(_class_table(results, classes))
    for n in notes:
        console.print(f"[yellow]note:[/yellow] {n}")


def _class_table(results: list[Result], classes: list[str]) -> Any:
    """Per priority class (the spec's `priorities:`): hit rate and modelled TTFT p50/p99 per configuration."""
    from rich import box
    from rich.table import Table

    t = Table(
        title="per priority class: hit rate %, TTFT ms p50/p99", title_justify="left", box=box.SIMPLE_HEAD
    )
    t.add_column("policy")
    t.add_column("pool", justify="right")
    t.add_column("host ×", justify="right")
    for c in classes:
        t.add_column(c, justify="right")
    for r in results:
        cells = []
        for c in classes:
            h, _i, p = r.per_class.get(c, (0, 0, 0))
            q = r.ttft_ms_by_class.get(c)
            cells.append(f"{h / p:.1%} · {q['p50']:.0f}/{q['p99']:.0f}" if p and q else "-")
        t.add_row(r.config.policy, f"{r.config.pool:,}", f"{r.config.host_ratio:g}", *cells)
    return t


def _hit_rate_table(
    title: str, results: list[Result], field: str, prefix: str, keys: list[int], first: int = 0
) -> Any:
    """One row per configuration, one column per turn or position: hit rate (ideal).

    `first` is the label of key 0: turns are numbered from 1, as in the report; positions count from 0.
    """
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("policy")
    t.add_column("pool", justify="right")
    t.add_column("host ×", justify="right")
    for k in keys:
        t.add_column(f"{prefix}{k + first}", justify="right")
    for r in results:
        cells = []
        for k in keys:
            h, i, p = getattr(r, field).get(k, (0, 0, 0))
            cells.append(f"{h / p:.0%} ({i / p:.0%})" if p else "-")
        t.add_row(r.config.policy, f"{r.config.pool:,}", f"{r.config.host_ratio:g}", *cells)
    return t


def draw_chart(trace: Trace, results: list[Result], path: Path) -> None:
    """Hit rate against device pool, one line per policy x host tier, the unbounded ideal dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    lines: dict[tuple, list] = {}
    for r in results:
        c = r.config
        lines.setdefault((c.policy, c.host_ratio, c.write_policy if c.host_ratio else ""), []).append(
            (c.pool, r.hit_rate)
        )
    for (pol, ratio, wp), pts in lines.items():
        pts.sort()
        label = pol if not ratio else f"{pol} +host {ratio:g}x {wp}"
        ax.plot(
            [p for p, _ in pts],
            [h for _, h in pts],
            marker="o",
            linestyle="-" if not ratio else "--",
            label=label,
        )
    ideal = results[0].ideal_rate if results else 0
    ax.axhline(ideal, color="grey", linestyle=":", label="ideal (unbounded)")
    ax.set_xscale("log")
    ax.set_xlabel(f"device pool ({'blocks' if trace.kind == 'blocks' else 'tokens'})")
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(1.0))  # % like the tables
    ax.set_ylabel(f"prefix hit rate, % of prompt {'blocks' if trace.kind == 'blocks' else 'tokens'}")
    ax.set_title(f"{trace.name}: hit rate vs pool")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
