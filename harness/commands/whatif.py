"""`harness whatif`: which policy, which pool, is HiCache worth it, from a trace in seconds."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.errors import HarnessError

POLICIES = ("lru", "lfu", "slru", "tlru", "priority", "fifo", "mru", "filo")


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Replay a trace offline through SGLang 0.5.23's radix cache for each policy x pool x host tier.",
    )
    p.add_argument(
        "inputs", nargs="+", type=Path, metavar="INPUT", help="Mooncake-format .jsonl or spec .yaml"
    )
    p.add_argument("--policy", default="lru,lfu,slru", help="comma list (default lru,lfu,slru)")
    p.add_argument("--pool", required=True, help="device pools, comma list (tokens; blocks for block traces)")
    p.add_argument(
        "--host-ratio", default="0", help="host pool = ratio x device pool, comma list (0 = no HiCache)"
    )
    p.add_argument("--write-policy", default="write_through", help="HiCache write policy, comma list")
    p.add_argument(
        "--policy-config",
        default=None,
        help='JSON, e.g. \'{"threshold": 4096, "next_prompt_estimate": 512}\'',
    )
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--block-size", type=int, default=512, help="tokens per hash id in Mooncake traces")
    p.add_argument("--mode", choices=("sglang", "exact"), default="sglang")
    p.add_argument(
        "--tree",
        choices=("unified", "radix"),
        default="unified",
        help="SGLang tree to reproduce: unified (UnifiedRadixCache, 0.5.23's server) or radix (plain RadixCache)",
    )
    p.add_argument(
        "--card-profile", default=None, help="timing model for the TTFT column (harness.sim.cards)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="requests in flight for spec and capture inputs (default: the input's own concurrency)",
    )
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("-o", "--output", type=Path, default=None, help="folder for results.json and the charts")
    return p


def _list(flag: str, text: str, conv):
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(conv(part))
        except ValueError:
            raise HarnessError(f"{flag}: bad value {part!r}") from None
    if not out:
        raise HarnessError(f"{flag}: empty list")
    return out


def _configs(args) -> list:
    from harness.sim.hicache import WRITE_POLICIES
    from harness.sim.policies import validate
    from harness.whatif import Config

    policies = _list("--policy", args.policy, str.lower)
    pools = _list("--pool", args.pool, int)
    ratios = _list("--host-ratio", args.host_ratio, float)
    writes = _list("--write-policy", args.write_policy, str)
    cfg: dict = {}
    if args.policy_config:
        try:
            cfg = json.loads(args.policy_config)
        except json.JSONDecodeError as e:
            raise HarnessError(f"--policy-config: not JSON ({e.msg})") from None
        if not isinstance(cfg, dict):
            raise HarnessError("--policy-config: expected a JSON object")
    for w in writes:
        if w not in WRITE_POLICIES:
            raise HarnessError(f"--write-policy: {w!r} is not one of {', '.join(WRITE_POLICIES)}")
    for n in pools:
        if n <= 0:
            raise HarnessError(f"--pool: {n} must be positive")
    if args.page_size < 1:
        raise HarnessError(f"--page-size: {args.page_size} must be >= 1")
    out = []
    for pol in policies:
        own = {k: v for k, v in cfg.items() if pol in ("slru", "tlru")}
        if pol == "tlru" and args.tree == "radix":
            raise HarnessError(
                "--tree radix: --policy tlru needs the unified tree (SGLang's plain RadixCache has no "
                "T-LRU bookkeeping); drop tlru or use --tree unified"
            )
        if pol == "tlru" and not own:
            raise HarnessError(
                '--policy tlru needs --policy-config \'{"threshold": T, "next_prompt_estimate": Q}\''
            )
        if pol == "slru":
            own = {k: v for k, v in own.items() if k == "protected_threshold"}
        if pol == "tlru":
            own = {k: v for k, v in own.items() if k in ("threshold", "next_prompt_estimate")}
        try:
            validate(pol, own)
        except ValueError as e:
            raise HarnessError(f"--policy {pol}: {e}") from None
        for pool in pools:
            for ratio in ratios:
                for w in writes if ratio > 0 else writes[:1]:
                    out.append(
                        Config(
                            pol,
                            pool,
                            ratio,
                            w,
                            args.page_size,
                            args.mode,
                            tuple(sorted(own.items())),
                            args.tree,
                        )
                    )
    return out


def _table(trace, results, notes) -> None:
    from rich.console import Console
    from rich.table import Table

    unit = "blocks" if trace.kind == "blocks" else "tokens"
    how = (
        f"the sim's scheduler at concurrency {trace.concurrency}"
        if trace.concurrency is not None
        else "one request at a time"
    )
    t = Table(title=f"{trace.name}: {len(trace.requests)} requests ({how}), pools in {unit}")
    for col in (
        "policy",
        "pool",
        "host",
        "hit",
        "ideal",
        "device",
        "host hit",
        "evicted",
        "load-back",
        "TTFT p50/p99 ms",
        "replay s",
    ):
        t.add_column(col, justify="left" if col == "policy" else "right")
    turns = sorted({k for r in results for k in r.per_turn})
    for r in results:
        c = r.config
        host = "-" if c.host_ratio == 0 else f"{c.host_ratio:g}x {c.write_policy.replace('write_', 'w')}"
        t.add_row(
            c.policy,
            f"{c.pool:,}",
            host,
            f"{r.hit_rate:.1%}",
            f"{r.ideal_rate:.1%}",
            f"{r.device_hit_tokens / max(r.prompt_tokens, 1):.1%}",
            f"{r.host_hit_tokens / max(r.prompt_tokens, 1):.1%}",
            f"{r.evicted_tokens:,}",
            f"{r.load_back_tokens:,}",
            f"{r.ttft_ms['p50']:.0f}/{r.ttft_ms['p99']:.0f}",
            f"{r.seconds:.2f}",
        )
    console = Console(width=None if sys.stdout.isatty() else 180)
    console.print(t)
    if len(turns) > 1:
        tt = Table(title="hit rate per turn (ideal in brackets)")
        tt.add_column("policy")
        tt.add_column("pool", justify="right")
        tt.add_column("host", justify="right")
        for turn in turns:
            tt.add_column(f"t{turn}", justify="right")
        for r in results:
            cells = []
            for turn in turns:
                h, i, p = r.per_turn.get(turn, (0, 0, 0))
                cells.append(f"{h / p:.0%} ({i / p:.0%})" if p else "-")
            tt.add_row(r.config.policy, f"{r.config.pool:,}", f"{r.config.host_ratio:g}", *cells)
        console.print(tt)
    positions = sorted({k for r in results for k in r.per_position})
    if positions and any(r.group is not None for r in trace.requests):
        tp = Table(title="hit rate per session position: times the group's prefix was sent before (ideal)")
        tp.add_column("policy")
        tp.add_column("pool", justify="right")
        tp.add_column("host", justify="right")
        shown = positions if len(positions) <= 12 else positions[:11] + positions[-1:]
        for pos in shown:
            tp.add_column(f"p{pos}", justify="right")
        for r in results:
            cells = []
            for pos in shown:
                h, i, p = r.per_position.get(pos, (0, 0, 0))
                cells.append(f"{h / p:.0%} ({i / p:.0%})" if p else "-")
            tp.add_row(r.config.policy, f"{r.config.pool:,}", f"{r.config.host_ratio:g}", *cells)
        console.print(tp)
    for n in notes:
        console.print(f"[yellow]note:[/yellow] {n}")


def _chart(trace, results, path: Path) -> None:
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
    ax.set_ylabel("prefix hit rate (tokens)")
    ax.set_title(f"{trace.name}: hit rate vs pool")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args) -> int:
    from harness.whatif import diagnose, ideal_hits, sweep
    from harness.whatif_trace import read_input

    configs = _configs(args)
    if args.card_profile:
        try:
            from harness.sim.cards import get_profile

            get_profile(args.card_profile)
        except ImportError:
            pass
    everything = []
    for path in args.inputs:
        trace = read_input(path, args.block_size)
        if args.concurrency is not None:
            if args.concurrency < 1:
                raise HarnessError(f"--concurrency: {args.concurrency} must be >= 1")
            if trace.concurrency is None:
                raise HarnessError(
                    f"--concurrency: {path} is a trace without sessions; it replays one request at a time"
                )
            trace.concurrency = args.concurrency
        results = sweep(trace, configs, args.card_profile, args.workers)
        notes = trace.notes + diagnose(trace, ideal_hits(trace, 1))
        everything.append(
            {
                "input": str(path),
                "requests": len(trace.requests),
                "unit": trace.kind,
                "concurrency": trace.concurrency,
                "notes": notes,
                "results": [r.to_dict() for r in results],
            }
        )
        if not args.json:
            _table(trace, results, notes)
        if args.output:
            args.output.mkdir(parents=True, exist_ok=True)
            chart = args.output / f"whatif-{trace.name}.png"
            _chart(trace, results, chart)
            if not args.json:
                print(f"chart: {chart}")
    if args.output:
        from harness.capture import write_json_atomic

        write_json_atomic(args.output / "whatif.json", everything)
    if args.json:
        json.dump(everything, sys.stdout, indent=1)
        print()
    return 0
