"""`harness bench`: launch servers from profiles, sweep points x seeds, then summarize, report, validate.

`--server-kind auto` runs `launch: sglang` profiles on SGLang when it imports and NVML sees a GPU,
otherwise on the embedded sim with a card profile; the choice is printed first, in one line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.commands import options
from harness.errors import HarnessError
from harness.sweep.suites import SUITES


def build_parser(prog: str) -> argparse.ArgumentParser:
    from harness.servers.kind import OTHER_ENGINES, SERVER_KINDS

    p = argparse.ArgumentParser(
        prog=prog,
        description="Launch servers from profiles, sweep servers x points x seeds (resumable), "
        "then summarize, report and validate.",
    )
    options.add_node(p)
    p.add_argument(
        "--suite", choices=sorted(SUITES), default="default", help="experiments to run (default: default)"
    )
    p.add_argument(
        "--spec",
        nargs="+",
        action="extend",
        metavar="FILE",
        help="experiment specs to run instead of a suite, in order (repeatable: --spec A --spec B runs both)",
    )
    p.add_argument(
        "--server-kind",
        choices=SERVER_KINDS,
        default="auto",
        help="what `launch: sglang` profiles run as (default auto: SGLang if importable and a GPU is visible; "
        "sglang-cpu: SGLang's own server on this CPU, with the flags and stand-ins a CPU run needs; "
        f"{', '.join(OTHER_ENGINES)}: that engine (the sim keeps the profiles' SGLang flags, another engine "
        "loads the same model and drops them)",
    )
    p.add_argument(
        "--sglang-python",
        metavar="PATH",
        help="the python of a venv that has SGLang, for profiles without `python:` (default: $HARNESS_SGLANG_PYTHON, "
        "else this harness's own; with --server-kind sglang-cpu the venv `make bench-sglang` builds)",
    )
    p.add_argument("--model", help="model path or name SGLang loads (default: the spec's model)")
    p.add_argument("--capture", type=Path, default=Path("capture"), help="capture root (default: capture)")
    p.add_argument(
        "--summaries", type=Path, default=Path("summaries"), help="summaries folder (default: summaries)"
    )
    options.add_only(p)
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
        "--telemetry-interval-s",
        type=float,
        default=0.2,
        metavar="S",
        help="NVML sampling interval (default 0.2; 0.01 samples at the sampler's full rate, for the "
        "prefill-window clock of short prefills)",
    )
    p.add_argument(
        "--min-free-mb", type=int, default=100, help="refuse to start with less free disk (default 100)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    options.add_metrics_interval(p)
    options.add_workers(p)
    return p


DRY_RUN_MODEL = "MODEL_PATH"


def run(args: argparse.Namespace) -> int:
    from harness.capture.redact import spec_redactor
    from harness.servers.kind import choose_kind
    from harness.servers.process import install_signal_handlers
    from harness.sweep import bench, pipeline, plan
    from harness.sweep.suites import suite_files

    if not args.telemetry_interval_s > 0:
        raise HarnessError(f"--telemetry-interval-s {args.telemetry_interval_s}: must be > 0")
    kind, why = choose_kind(args.server_kind, args.sglang_python, dry_run=args.dry_run)
    sglang_python = args.sglang_python
    if kind == "sglang-cpu":
        from harness.servers.kind import sglang_cpu_python

        sglang_python = sglang_cpu_python(args.sglang_python)
    from harness.spec.engines import LAUNCH_KINDS

    others = ", ".join(k for k in LAUNCH_KINDS if k not in ("sglang", "sim"))
    scope = f"; profiles with another launch ({others}) run as their launch says"
    if args.retries < 0:
        raise HarnessError(f"--retries: expected 0 or more, got {args.retries}")
    if args.time_scale is not None and args.time_scale <= 0:
        raise HarnessError(f"--time-scale: expected a positive number, got {args.time_scale}")
    specs = plan.load_specs([Path(f) for f in args.spec] if args.spec else suite_files(args.suite))
    if kind == "sim":  # the card the sim models, as the plans will pass it: the first thing a user reads
        cards = sorted(
            {args.card_profile or s.sim_settings().card_profile or plan.DEFAULT_CARD for s in specs}
        )
        scale = (
            f"{args.time_scale:g}" if args.time_scale is not None else "from each spec's suite.sim, else 1"
        )
        print(
            f"server kind: sim, modelling card {', '.join(cards) or plan.DEFAULT_CARD} (choose another with "
            f"--card-profile, e.g. --card-profile h100; time scale {scale}) for `launch: sglang` profiles, "
            f"because {why}{scope}",
            flush=True,
        )
    else:
        print(f"server kind: {kind} for `launch: sglang` profiles: {why}{scope}", flush=True)
    model = args.model
    if model is None and args.dry_run and kind == "sglang":  # a preview needs no model: a placeholder
        model = DRY_RUN_MODEL
        print(f"no --model: the launch lines show {DRY_RUN_MODEL} where the model to load goes", flush=True)
    specs = [options.with_workers(s, args.workers) for s in specs]
    opts = plan.BenchOptions(
        node=args.node,
        capture=args.capture,
        summaries=args.summaries,
        server_kind=kind,
        kind_reason=why,
        sglang_python=sglang_python,
        model=model,
        only=list(args.only),
        servers=list(args.server),
        retries=args.retries,
        time_scale=args.time_scale,
        card_profile=args.card_profile,
        quiet=args.quiet,
        lock_clocks=args.lock_clocks,
        telemetry_interval_s=args.telemetry_interval_s,
        metrics_interval_s=options.check_metrics_interval(args.metrics_interval_s),
        min_free_mb=args.min_free_mb,
        suite=None if args.spec else args.suite,
        argv=["harness", "bench", *sys.argv[2:]] if sys.argv[1:2] == ["bench"] else ["harness", "bench"],
    )
    plans = plan.plan_all(specs, opts)
    redactor = spec_redactor(specs)
    plan.check_model(plans)
    if args.dry_run:
        plan.check_traces([p.spec for p in plans if not p.skipped])  # a real run checks them in run_plans
        for line in plan.describe_plan(plans, opts, redactor):
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
        f"sweep: {ran - sum(s != 'ok' for s in outcome.statuses.values())}/{ran} runs ok (a run: one point "
        "at one seed), "
        f"{outcome.skipped_ok} already ok, {outcome.restarts} server restarts, "
        f"{len(outcome.server_failures)} servers failed, {time.monotonic() - t0:.1f}s"
    )
    stages = pipeline.after_sweep(opts, log)
    log(f"bench: done in {time.monotonic() - t0:.1f}s")
    for line in stages.verdict_lines:  # the same line `harness validate` ends with, last so it is read
        log(line)
    return 1 if outcome.not_ok or stages.flagged else 0
