"""`make bench-sglang`: SGLang 0.5.23's own server on this CPU, through the profiles a GPU node runs.

Prepares (or reuses) the pinned SGLang CPU venv and a tiny random-weight model, benches
workloads/sglang-cpu/*.yaml with `--server-kind sglang-cpu`, and writes summaries/<node>.{json,md,html}
(default node sglang-cpu). Prints per point the hit rate from usage, SGLang's counters and its log, the
prediction, host hits and the cache state; ends with the verdict line.
Exit 0 when every point is ok and cold with the three sources within 1 point and host hits where the
working set outgrows the pool; 1 when not; 2 on bad input or a failed preparation step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.errors import HarnessError
from harness.realserver.sglang_suite import DEFAULT_NODE, DEFAULT_SPECS, run_sglang


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make bench-sglang", description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "specs", nargs="*", default=list(DEFAULT_SPECS), help="spec files (default: the sglang-cpu suite)"
    )
    p.add_argument("--node", default=DEFAULT_NODE, help=f"capture/summary name (default {DEFAULT_NODE})")
    p.add_argument("--capture", type=Path, default=Path("capture"))
    p.add_argument("--summaries", type=Path, default=Path("summaries"))
    p.add_argument("--progress", action="store_true", help="show the load generator's progress bars")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    print(
        "bench-sglang: SGLang 0.5.23's own server on this CPU (tiny random-weight model; docs/real-sglang.md)",
        flush=True,
    )
    try:
        run = run_sglang(
            args.specs,
            node=args.node,
            capture=args.capture,
            summaries=args.summaries,
            quiet=not args.progress,
        )
    except HarnessError as e:
        print(f"bench_sglang: error: {e}", file=sys.stderr)
        return e.exit_code
    print()
    for r in run.points:
        print(
            f"{r['experiment']}/{r['server']}/{r['point']}: {r['status']}, {r['cache_state']}; hit usage "
            f"{_pct(r['hit_rate_usage'])}, counters {_pct(r['hit_rate_counters'])}, log {_pct(r['hit_rate_log'])}, "
            f"predicted {_pct(r['predicted_hit_rate'])}; host-hit tokens {r['cached_host_tokens']}"
        )
    print(
        "times: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in run.seconds.items())
        + f"; total {time.monotonic() - t0:.1f} s"
    )
    problems = run.problems
    if problems:
        print("bench_sglang: checks failed:\n  " + "\n  ".join(problems), file=sys.stderr)
    for line in run.verdict_lines:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
