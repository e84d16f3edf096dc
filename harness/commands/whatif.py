"""`harness whatif`: which policy, which pool, is HiCache worth it, from a trace in seconds.

Argument parsing and printing only; the grid, the replay and the output live in harness.whatif.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.errors import HarnessError
from harness.spec.router_policies import policy_list

DEFAULT_OUTPUT = "whatif-out"


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
    p.add_argument(
        "--storage-backend",
        default="",
        help="HiCache L3 backends to try, comma list (file, mooncake, hf3fs, nixl; default none; needs --host-ratio)",
    )
    p.add_argument(
        "--storage-prefetch-policy",
        default="timeout",
        help="L3 prefetch stop policy: timeout (SGLang 0.5.23's default), best_effort, wait_complete",
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
        "--card-profile", default=None, help="timing model for the TTFT column (harness.sim.timing)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="requests in flight for spec and capture inputs (default: the input's own concurrency)",
    )
    r = p.add_argument_group(
        "routing (docs/whatif.md#routing-replay)",
        "replay N replicas behind SGLang's gateway (smg 1.13.0), each request routed as smg would",
    )
    r.add_argument("--replicas", default=None, help="replica counts, comma list (e.g. 1,2,4,8)")
    r.add_argument(
        "--router",
        default="cache_aware",
        help=f"smg policies, comma list: {policy_list()}, or all (default cache_aware)",
    )
    r.add_argument("--router-seed", type=int, default=0, help="seed of the replay's random choices")
    r.add_argument("--cache-threshold", type=float, default=0.3, help="smg's --cache-threshold")
    r.add_argument("--balance-abs-threshold", type=int, default=64, help="smg's --balance-abs-threshold")
    r.add_argument("--balance-rel-threshold", type=float, default=1.5, help="smg's --balance-rel-threshold")

    r.add_argument(
        "--eviction-interval",
        type=float,
        default=60.0,
        help="smg's --eviction-interval-secs (smg launch: 60)",
    )
    r.add_argument("--max-tree-size", type=int, default=67_108_864, help="smg's --max-tree-size, chars")
    r.add_argument(
        "--router-transport",
        choices=("http", "grpc"),
        default="http",
        help="what smg sees: http (the text; prefix_hash hashes its first 1,024 chars) or grpc (token ids)",
    )
    r.add_argument(
        "--l3",
        choices=("shared", "own", "both"),
        default="shared",
        help="with --storage-backend: one L3 for all",
    )
    r.add_argument("--slo", type=float, default=None, help="TTFT SLO in ms: share met and goodput per case")
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        nargs="?",
        const=Path(DEFAULT_OUTPUT),
        default=None,
        help=f"folder for whatif.json and the charts (bare -o: {DEFAULT_OUTPUT}/, which git ignores)",
    )
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
    from harness.whatif.grid import build_grid

    policy_config: dict = {}
    if args.policy_config:
        try:
            policy_config = json.loads(args.policy_config)
        except json.JSONDecodeError as e:
            raise HarnessError(f"--policy-config: not JSON ({e.msg})") from None
        if not isinstance(policy_config, dict):
            raise HarnessError("--policy-config: expected a JSON object")
    return build_grid(
        _list("--policy", args.policy, str.lower),
        _list("--pool", args.pool, int),
        _list("--host-ratio", args.host_ratio, float),
        _list("--write-policy", args.write_policy, str),
        policy_config,
        args.page_size,
        args.mode,
        args.tree,
        [""] + [b.strip() for b in args.storage_backend.split(",") if b.strip()],
        args.storage_prefetch_policy,
    )


def _routing(args, configs: list) -> int:
    """`--replicas`: the routing grid, its tables, chart and JSON."""
    from harness.whatif.inputs import read_input
    from harness.whatif.replay import diagnose, ideal_hits
    from harness.whatif.routing import POLICIES, RouterConfig
    from harness.whatif.routing_grid import build_cases, run_cases
    from harness.whatif.routing_output import draw_routing_chart, print_routing, routing_entry

    replicas = _list("--replicas", args.replicas, int)
    policies = list(POLICIES) if args.router.strip() == "all" else _list("--router", args.router, str.lower)
    base = RouterConfig(
        policy=policies[0] if policies[0] in POLICIES else "cache_aware",
        seed=args.router_seed,
        cache_threshold=args.cache_threshold,
        balance_abs_threshold=args.balance_abs_threshold,
        balance_rel_threshold=args.balance_rel_threshold,
        eviction_interval_s=args.eviction_interval,
        max_tree_size=args.max_tree_size,
        transport=args.router_transport,
    )
    for pol in policies:
        RouterConfig(policy=pol)  # one line naming the flag and value when unknown
    if args.slo is not None and args.slo <= 0:
        raise HarnessError(f"--slo: {args.slo} must be > 0 (ms)")
    cases = build_cases(configs, replicas, base, policies, args.l3)
    everything = []
    for path in args.inputs:
        trace = _read(args, path, read_input)
        results = run_cases(trace, cases, args.card_profile, args.workers)
        notes = trace.notes + diagnose(trace, ideal_hits(trace, 1))
        everything.append(routing_entry(path, trace, notes, results, args.slo))
        if not args.json:
            print_routing(trace, results, notes, args.slo)
        if args.output:
            args.output.mkdir(parents=True, exist_ok=True)
            chart = args.output / f"whatif-routing-{trace.name}.png"
            draw_routing_chart(trace, results, chart)
            if not args.json:
                print(f"chart: {chart}")
    _write(args, everything)
    return 0


def _read(args, path: Path, read_input):
    trace = read_input(path, args.block_size)
    if args.concurrency is not None:
        if args.concurrency < 1:
            raise HarnessError(f"--concurrency: {args.concurrency} must be >= 1")
        if trace.concurrency is None:
            raise HarnessError(
                f"--concurrency: {path} is a trace without sessions; it replays one request at a time"
            )
        trace.concurrency = args.concurrency
    return trace


def _write(args, everything: list) -> None:
    if args.output:
        from harness.capture import write_json_atomic

        write_json_atomic(args.output / "whatif.json", everything)
    if args.json:
        json.dump(everything, sys.stdout, indent=1)
        print()


def run(args) -> int:
    from harness.whatif.inputs import read_input
    from harness.whatif.output import draw_chart, print_tables, results_entry
    from harness.whatif.replay import diagnose, ideal_hits, sweep

    configs = _configs(args)
    if args.card_profile:
        from harness.sim.timing import get_profile

        get_profile(args.card_profile)
    if args.replicas is not None:
        return _routing(args, configs)
    everything = []
    for path in args.inputs:
        trace = _read(args, path, read_input)
        results = sweep(trace, configs, args.card_profile, args.workers)
        notes = trace.notes + diagnose(trace, ideal_hits(trace, 1))
        everything.append(results_entry(path, trace, notes, results))
        if not args.json:
            print_tables(trace, results, notes)
        if args.output:
            args.output.mkdir(parents=True, exist_ok=True)
            chart = args.output / f"whatif-{trace.name}.png"
            draw_chart(trace, results, chart)
            if not args.json:
                print(f"chart: {chart}")
    _write(args, everything)
    return 0
