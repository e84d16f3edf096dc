"""`make bench-real`: build (or reuse) llama-server, run the llama-real suite through the harness, check it.

Writes capture/<node>/..., summaries/<node>.json and summaries/<node>.md (default node: llama-cpu), prints
the client-vs-server TTFT gap, hit rates from usage and from the server's timings, and the build and run
times. Ends with the verdict line `harness validate` prints for the summary. Exit 0 when every client/server
check holds, 1 when one does not, 2 on bad input or a failed preparation step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.errors import HarnessError
from harness.realserver.suite import DEFAULT_NODE, DEFAULT_SPECS, run_real


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make bench-real", description=(__doc__ or "").splitlines()[0])
    p.add_argument("specs", nargs="*", default=list(DEFAULT_SPECS), help="llama-real spec files")
    p.add_argument("--node", default=DEFAULT_NODE, help=f"capture/summary name (default {DEFAULT_NODE})")
    p.add_argument("--capture", type=Path, default=Path("capture"))
    p.add_argument("--summaries", type=Path, default=Path("summaries"))
    p.add_argument("--progress", action="store_true", help="show the load generator's progress bars")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        run = run_real(
            args.specs,
            node=args.node,
            capture=args.capture,
            summaries=args.summaries,
            quiet=not args.progress,
        )
    except HarnessError as e:
        print(f"bench_llama: error: {e}", file=sys.stderr)
        return e.exit_code
    print()
    for key, c in run.checks.items():
        print(
            f"{key}: {c.ok}/{c.requests} ok; TTFT-prompt_ms gap median {_ms(c.gap_ms_median)} "
            f"(p90 {_ms(c.gap_ms_p90)}, min {_ms(c.gap_ms_min)}); hit usage {_pct(c.hit_rate_usage)} "
            f"= timings {_pct(c.hit_rate_timings)}; first {_pct(c.hit_rate_usage_first)}, "
            f"later {_pct(c.hit_rate_usage_later)}"
        )
    print(
        "times: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in run.seconds.items())
        + f"; total {time.monotonic() - t0:.1f} s"
    )
    print(f"summary: {run.summary_path}\nreport:  {run.report_path}")
    if run.problems:
        print("bench_llama: checks failed:\n  " + "\n  ".join(run.problems), file=sys.stderr)
    else:
        print("bench_llama: every client/server check holds (TTFT vs prompt_ms, usage vs timings)")
    for line in run.verdict_lines:  # the clock verdicts, worded as `harness validate` words them
        print(line)
    return 1 if run.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
