"""`harness bench`: launch servers from profiles, sweep points x seeds, then summarize, report, validate.

`--server-kind auto` runs `launch: sglang` profiles on SGLang when it imports and NVML sees a GPU,
otherwise on the embedded sim with a card profile; the choice is printed first, in one line.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

from harness.errors import HarnessError

SUITES: dict[str, tuple[str, ...]] = {
    "default": ("working-set.yaml", "eviction-multiturn.yaml"),
    "smoke": ("smoke-bench.yaml",),
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Launch servers from profiles, sweep servers x points x seeds (resumable), "
        "then summarize, report and validate.",
    )
    p.add_argument(
        "--node", default=socket.gethostname().split(".")[0], help="node name (default: this host)"
    )
    p.add_argument(
        "--suite", choices=sorted(SUITES), default="default", help="experiments to run (default: default)"
    )
    p.add_argument("--spec", nargs="+", metavar="FILE", help="experiment specs to run instead of a suite")
    p.add_argument(
        "--server-kind",
        choices=("auto", "sglang", "sim"),
        default="auto",
        help="what `launch: sglang` profiles run as (default auto: SGLang if importable and a GPU is visible)",
    )
    p.add_argument("--model", help="model path or name SGLang loads (default: the spec's model)")
    p.add_argument("--capture", type=Path, default=Path("capture"), help="capture root (default: capture)")
    p.add_argument(
        "--summaries", type=Path, default=Path("summaries"), help="summaries folder (default: summaries)"
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run only sweep points where KEY equals VALUE (repeatable)",
    )
    p.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="NAME",
        help="run only these servers (glob; repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and the exact launch command lines")
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="retries of a point whose server died or that failed (default 2)",
    )
    p.add_argument(
        "--time-scale", type=float, help="the sim's wall seconds per simulated second (<1 is faster)"
    )
    p.add_argument("--card-profile", help="the sim's card timing model (default: the spec's, else l4-8b)")
    p.add_argument(
        "--lock-clocks", type=int, metavar="MHZ", help="lock the GPUs' SM clock for the run (needs root)"
    )
    p.add_argument(
        "--min-free-mb", type=int, default=100, help="refuse to start with less free disk (default 100)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def choose_kind(requested: str) -> tuple[str, str]:
    """(kind, why) for `launch: sglang` profiles."""
    if requested == "sim":
        return "sim", "asked for with --server-kind sim"
    gpu_line = _gpu_visible()
    sglang_ok, sglang_why = (
        _sglang_importable() if requested == "sglang" or gpu_line[0] else (False, "not checked")
    )
    if requested == "sglang":
        if not sglang_ok:
            raise HarnessError(
                f"--server-kind sglang: {sglang_why} (pip install sglang, or use --server-kind sim)"
            )
        return "sglang", "asked for with --server-kind sglang"
    if gpu_line[0] and sglang_ok:
        return "sglang", f"sglang imports and NVML sees {gpu_line[1]}"
    if not gpu_line[0]:
        return "sim", f"no GPU visible ({gpu_line[1]})"
    return "sim", f"sglang is not usable here ({sglang_why})"


def _gpu_visible() -> tuple[bool, str]:
    try:
        from harness.telemetry.gpus import snapshot

        snap = snapshot()
    except Exception as e:  # noqa: BLE001
        return False, f"NVML check failed: {type(e).__name__}: {e}"
    gpus = snap.get("gpus") or []
    if gpus:
        names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict)})
        return True, f"{len(gpus)} GPU(s): {', '.join(names)}"
    return False, str(snap.get("status") or "NVML sees no GPU")


def _sglang_importable() -> tuple[bool, str]:
    try:
        import sglang  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means we cannot launch it
        return False, f"import sglang failed: {type(e).__name__}: {e}"
    return True, "ok"


def _suite_files(suite: str) -> list[Path]:
    roots = [Path.cwd() / "workloads", Path(__file__).resolve().parents[2] / "workloads"]
    out = []
    for name in SUITES[suite]:
        found = next((r / name for r in roots if (r / name).is_file()), None)
        if found is None:
            raise HarnessError(f"--suite {suite}: {name} not found in {' or '.join(str(r) for r in roots)}")
        out.append(found)
    return out


def run(args: argparse.Namespace) -> int:
    from harness import bench
    from harness.servers.process import install_signal_handlers
    from harness.spec import load_spec

    kind, why = choose_kind(args.server_kind)
    if kind == "sim":
        card = args.card_profile or f"from each spec's suite.sim, else {bench.DEFAULT_CARD}"
        scale = (
            f"{args.time_scale:g}" if args.time_scale is not None else "from each spec's suite.sim, else 1"
        )
        print(
            f"server kind: sim (the embedded simulator; card profile {card}; time scale {scale}) because {why}",
            flush=True,
        )
    else:
        print(f"server kind: sglang: {why}", flush=True)

    if args.retries < 0:
        raise HarnessError(f"--retries: expected 0 or more, got {args.retries}")
    if args.time_scale is not None and args.time_scale <= 0:
        raise HarnessError(f"--time-scale: expected a positive number, got {args.time_scale}")
    files = [Path(f) for f in args.spec] if args.spec else _suite_files(args.suite)
    specs = [load_spec(f) for f in files]
    names = [s.name for s in specs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise HarnessError(f"--spec: two specs are named {dup!r}; experiment names must be distinct")
    opts = bench.BenchOptions(
        node=args.node,
        capture=args.capture,
        summaries=args.summaries,
        server_kind=kind,
        kind_reason=why,
        model=args.model,
        only=list(args.only),
        servers=list(args.server),
        retries=args.retries,
        time_scale=args.time_scale,
        card_profile=args.card_profile,
        quiet=args.quiet,
        lock_clocks=args.lock_clocks,
        min_free_mb=args.min_free_mb,
        argv=["harness", "bench", *sys.argv[2:]] if sys.argv[1:2] == ["bench"] else ["harness", "bench"],
    )
    plans = [bench.plan_experiment(s, opts) for s in specs]
    if args.only and all(p.skipped for p in plans):
        raise HarnessError(f"--only {' '.join(args.only)}: {plans[0].skipped}")
    if args.server and all(p.skipped for p in plans):
        raise HarnessError(f"--server: {plans[0].skipped}")
    redactor = bench.build_redactor(specs)
    bench.check_model(plans, opts)
    if args.dry_run:
        for line in bench.describe_plan(plans, opts, redactor):
            print(line)
        return 0

    def log(msg: str) -> None:
        print(msg, flush=True)

    install_signal_handlers()
    t0 = time.monotonic()
    try:
        outcome = bench.run_plans(plans, opts, redactor, log)
    except KeyboardInterrupt:
        print(
            f"harness bench: stopped after {time.monotonic() - t0:.0f}s; servers stopped; "
            "run the same command again to resume",
            file=sys.stderr,
            flush=True,
        )
        raise
    ran = len(outcome.statuses)
    log(
        f"sweep: {ran - sum(s != 'ok' for s in outcome.statuses.values())}/{ran} points ok, "
        f"{outcome.skipped_ok} already ok, {outcome.restarts} server restarts, "
        f"{len(outcome.server_failures)} servers failed, {time.monotonic() - t0:.1f}s"
    )
    flagged = bench.run_stages(opts, log)
    log(f"bench: done in {time.monotonic() - t0:.1f}s")
    return 1 if outcome.not_ok or flagged else 0
