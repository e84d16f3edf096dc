"""`harness advise`: from a user's own traffic to "enable HiCache? which policy? how big a pool?".

Argument parsing and printing only; the work lives in harness.advise.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.engines.confirm import CONFIRM_TARGETS
from harness.errors import HarnessError

DEFAULT_OUTPUT = "advise-out"


# a GiB in GB: --host-memory takes GB (1e9 bytes), as `free -g` does not and the cards' sheets do
GIB_IN_GB = 2**30 / 1e9


def _number(flag: str, kind: type[int] | type[float], example: str) -> Callable[[str], Any]:
    """argparse's type for a numeric flag: a bad value is one line naming the flag (a HarnessError, which
    argparse lets through to the CLI), not the whole usage that `type=int` prints."""

    def parse(text: str) -> int | float:
        try:
            return kind(text.strip().replace("_", ""))
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise HarnessError(f"{flag}: {text!r}: expected {what}, e.g. {example}") from None

    return parse


def host_memory(text: str) -> float:
    """--host-memory: GB, bare or with a GB / GiB suffix (256, 256GB, 238.4GiB); anything else, one line."""
    m = re.fullmatch(r"\s*([0-9.eE+_-]+)\s*(GB|GIB)?\s*", text, re.IGNORECASE)
    try:
        if m is None:
            raise ValueError(text)
        value = float(m.group(1).replace("_", ""))
    except ValueError:
        raise HarnessError(
            f"--host-memory: {text!r}: expected a number of GB, e.g. 256 (or 256GB, 238.4GiB)"
        ) from None
    return value * GIB_IN_GB if (m.group(2) or "").upper() == "GIB" else value


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Hit rate at every pool size, working set, an exact what-if grid around the knee, "
        "break-even per tier and a recommendation, from a trace, a capture or a spec.",
    )
    p.add_argument(
        "inputs", nargs="+", type=Path, metavar="INPUT", help="Mooncake .jsonl, spec .yaml or capture"
    )
    p.add_argument("--card", default="l4", help="card (or card-model alias) the physics models (default l4)")
    from harness.sim.models import DEFAULT_MODEL, builtin_names

    p.add_argument(
        "--model",
        default=None,
        help=f"a built-in model ({', '.join(builtin_names())}) or a folder with config.json "
        f"(default {DEFAULT_MODEL})",
    )
    p.add_argument(
        "--pool",
        type=_number("--pool", int, "20000"),
        default=None,
        help="current device pool (tokens; blocks for block traces; default: the card's)",
    )
    p.add_argument(
        "--host-memory",
        type=host_memory,
        default=None,
        help="host memory of one node for HiCache, GB; its replicas share it (default: this machine's when it "
        "has the card's GPU, else the card's typical host)",
    )
    p.add_argument(
        "--replicas-per-node",
        type=_number("--replicas-per-node", int, "2"),
        default=None,
        help="replicas sharing one node's host memory and GPUs (default: all of them, as far as the GPUs go)",
    )
    p.add_argument(
        "--gpus-per-node",
        type=_number("--gpus-per-node", int, "8"),
        default=None,
        help="GPUs a node has, one per replica (default: this machine's when it has the card's GPU, else 8)",
    )
    p.add_argument("--slo", default=None, help="ttft_ms=N,tpot_ms=M: goodput against this SLO")
    p.add_argument("--curve-at", default="", help="pool sizes the curve must include exactly, comma list")
    p.add_argument(
        "--block-size",
        type=_number("--block-size", int, "512"),
        default=512,
        help="tokens per hash id in Mooncake traces",
    )
    p.add_argument(
        "--workers",
        type=_number("--workers", int, "4"),
        default=None,
        help="processes for the grid (default: all cores)",
    )
    p.add_argument(
        "--confirm",
        type=_number("--confirm", int, "3"),
        default=0,
        help="launch the top K candidates live (as bench does) and measure",
    )
    p.add_argument(
        "--server-kind",
        choices=tuple(CONFIRM_TARGETS),
        default="sim",
        help="what --confirm launches (default sim; sglang-cpu: SGLang's own server on this CPU)",
    )
    p.add_argument(
        "--sglang-python", metavar="PATH", help="the python of a venv with SGLang (as bench takes it)"
    )
    p.add_argument(
        "--server-model", metavar="PATH", help="model the server loads for --confirm (default: --model)"
    )
    p.add_argument(
        "--live-block-tokens",
        type=_number("--live-block-tokens", int, "16"),
        default=None,
        help="--confirm on a Mooncake trace: tokens sent per hash id (default: the trace's --block-size on "
        "--server-kind sglang, 16 on the sim and the CPU servers)",
    )
    p.add_argument(
        "--confirm-requests",
        type=_number("--confirm-requests", int, "600"),
        default=None,
        help="--confirm on a trace's first N requests, each pool scaled to the slice (docs/advise.md)",
    )
    p.add_argument(
        "--confirm-capacity",
        action="store_true",
        help="with --confirm: bench's capacity search on the recommendation (--server-kind), over the "
        "same slice, predicted against measured req/s (docs/advise.md)",
    )
    p.add_argument(
        "--confirm-time-limit",
        type=_number("--confirm-time-limit", float, "300"),
        default=None,
        metavar="S",
        help="stop --confirm after S seconds: what finished is kept as a partial confirm, exit 124 "
        "(Ctrl-C / SIGTERM: the same, exit 130)",
    )
    p.add_argument(
        "--replicas",
        default=None,
        help="replica counts behind smg, comma list: adds the routing policy, shared L3 and "
        "replicas-vs-bigger-pool steps (docs/advise.md#replicas)",
    )
    p.add_argument(
        "--speedup",
        type=_number("--speedup", float, "2"),
        default=1.0,
        help="at-load replay of a trace: its arrival times divided by this (as harness run sends it)",
    )
    p.add_argument(
        "--concurrency",
        type=_number("--concurrency", int, "8"),
        default=None,
        help="at-load replay: N requests in flight",
    )
    p.add_argument(
        "--agents",
        type=_number("--agents", int, "64"),
        default=None,
        help="at-load replay: N agents (conversations) at once, each next request its think time after the "
        "previous answer; capacity in agents per replica, TTFT p95 <= 2 s unless --slo",
    )
    p.add_argument(
        "--rate",
        type=_number("--rate", float, "2.5"),
        default=None,
        help="at-load replay: Poisson arrivals, requests/s",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the Markdown")
    p.add_argument("--quiet", action="store_true", help="print only the headline")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        nargs="?",
        const=Path(DEFAULT_OUTPUT),
        default=None,
        help=f"folder for advise.md/.html/.json (bare -o: {DEFAULT_OUTPUT}/)",
    )
    return p


def _ints(flag: str, text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if part:
            try:
                out.append(int(part.replace("_", "")))
            except ValueError:
                raise HarnessError(f"{flag}: bad value {part!r} (expected an integer)") from None
    return tuple(out)


def parse_slo(text: str | None):
    from harness.advise.slo import parse_slo as parse

    return parse(text)


# Python's collector, as advise's replays run (few_collections below): (gen0, gen1, gen2) thresholds
FEW_COLLECTIONS = (100_000, 50, 50)


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """The cyclic collector seldom, while advise runs: the replays keep millions of tree nodes and requests
    alive, which the default thresholds (700, 10, 10) had it walk over and over (a fifth of an L3 engine
    replay of a 100,000-request trace), to find next to nothing: the tree frees what it drops by reference
    count. The results do not change; the thresholds are restored after (tests run advise in-process)."""
    before = gc.get_threshold()
    gc.set_threshold(*FEW_COLLECTIONS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def run(args: argparse.Namespace) -> int:
    with few_collections():  # forked workers inherit it
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from harness.advise.advice import Options, advise, check, read
    from harness.advise.confirm import Launch, check_confirm, confirm
    from harness.advise.html import write_html
    from harness.advise.json_out import to_dict, write_json
    from harness.advise.markdown import render, write_markdown

    args.card = args.card.lower()  # card names are case-insensitive (--card H100)
    replicas = _ints("--replicas", args.replicas) if args.replicas else ()
    if args.replicas is not None and (not replicas or any(not 1 <= n <= 64 for n in replicas)):
        raise HarnessError(f"--replicas: {args.replicas!r}: expected replica counts within 1..64, comma list")
    launch = Launch(
        k=args.confirm,
        server_kind=args.server_kind,
        sglang_python=args.sglang_python,
        model=args.server_model or args.model,
        card=args.card,
        block_tokens=args.live_block_tokens,
        requests=args.confirm_requests,
        time_limit_s=args.confirm_time_limit,
        quiet=args.quiet,
        slo=parse_slo(args.slo),
        capacity=args.confirm_capacity,
    )
    opts = Options(
        card=args.card,
        model=args.model,
        pool=args.pool,
        host_memory_gb=args.host_memory,
        slo=parse_slo(args.slo),
        curve_at=_ints("--curve-at", args.curve_at),
        workers=args.workers,
        block_size=args.block_size,
        replicas=max(replicas, default=1),
        replicas_per_node=args.replicas_per_node,
        gpus_per_node=args.gpus_per_node,
    )
    profile = check(args.inputs, opts)
    check_confirm(args.inputs, launch)
    from harness.advise.load import check_load

    check_load(args.speedup, args.concurrency, args.rate, args.agents)
    if args.confirm:  # it launches servers: SIGTERM/SIGHUP unwind as Ctrl-C does, stopping them
        from harness.servers.process import install_signal_handlers

        install_signal_handlers()
    traces = read(args.inputs, opts)
    many = len(args.inputs) > 1
    failed = 0
    stopped = (
        0  # a partial confirm's exit code (124 time limit, 130 a signal): the inputs after it are not run
    )
    for path, trace in zip(args.inputs, traces, strict=True):
        if stopped:
            break
        from harness.advise.load import load_of, shown_at_load

        load = load_of(trace, args.speedup, args.concurrency, args.rate, args.agents)
        # one replica: the rows at load replay in advise's own pool, beside its L3 step
        a = advise(path, opts, profile, trace, None if replicas else load)
        if replicas:
            from harness.advise.replicas import advise_replicas

            slo_ms = opts.slo.ttft_ms if opts.slo is not None else None
            a.replicas = advise_replicas(
                trace,
                a.recommendation.chosen.config,
                replicas,
                profile,
                slo_ms,
                node=a.node,
                workers=opts.workers,
            )
            a.fill_fleet_launch()
            # at load on the fleet the replicas step chose
            a.load = load
            t_load = time.perf_counter()
            a.at_load = shown_at_load(a, trace, a.load, profile, opts.workers)
            a.seconds["at_load"] = time.perf_counter() - t_load
        from harness.advise.sizing import finish_at_load

        finish_at_load(a, trace, load, profile, opts.slo, opts.workers)
        out = None
        if args.output is not None:
            out = args.output / path.stem if many else args.output
            out.mkdir(parents=True, exist_ok=True)
        if args.confirm:
            keep = out / "confirm" if out is not None else None
            a.confirmed, a.confirm = confirm(path, a, launch, keep, trace, profile)
            failed += sum(c["status"] == "failed" for c in a.confirmed)
            if not a.confirm.partial and a.replicas is not None and a.replicas.chosen:
                from harness.advise.replicas_confirm import confirm_fleets

                fleet_keep = keep / "replicas" if keep else None
                a.replicas.confirmed = confirm_fleets(path, a, launch, fleet_keep, a.confirm, trace)
                failed += sum(c["status"] == "failed" for c in a.replicas.confirmed)
            if a.confirm.partial:
                stopped = a.confirm.stop.exit_code
        if out is not None:
            from harness import signals

            with signals.deferred():  # a stop signal now waits for the three files, then stops
                write_json(a, out / "advise.json")
                write_markdown(a, out / "advise.md")
                write_html(a, out / "advise.html")
        if args.json:
            print(json.dumps(to_dict(a), indent=2))
        elif args.quiet:
            print(a.recommendation.headline)
        else:
            sys.stdout.write(render(a))
    if failed:
        print(
            f"--confirm: {failed} candidate run(s) did not end ok (see the confirm/ folder)", file=sys.stderr
        )
    if stopped:
        print(f"--confirm: partial: {a.confirm.stop.reason} (exit {stopped})", file=sys.stderr)
        return stopped
    return 1 if failed else 0
