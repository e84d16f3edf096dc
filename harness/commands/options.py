"""Options several subcommands share (`bench`, `run`), defined once so their names, defaults and help agree."""

from __future__ import annotations

import argparse
import socket

DEFAULT_METRICS_INTERVAL_S = 0.5  # harness.telemetry.timeline.DEFAULT_INTERVAL_S; a test holds them equal


def add_node(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node", default=socket.gethostname().split(".")[0], help="node name (default: this host)"
    )


def add_only(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run only sweep points where KEY equals VALUE (repeatable)",
    )


def add_metrics_interval(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-interval-s",
        type=float,
        default=DEFAULT_METRICS_INTERVAL_S,
        metavar="S",
        help="scrape the server's /metrics every S seconds during each point into metrics.jsonl "
        "(every worker's and the gateway's behind smg; default 0.5; 0 turns it off)",
    )


def check_metrics_interval(v: float) -> float:
    """--metrics-interval-s: 0 (off) or a positive number of seconds."""
    import math

    from harness.errors import HarnessError

    if not (v >= 0 and math.isfinite(v)):
        raise HarnessError(
            f"--metrics-interval-s {v}: must be a finite number >= 0 (0 turns the timeline off)"
        )
    return v


def add_workers(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="load-generator processes per point, overriding the spec's `workers` (default: the spec's, else 1)",
    )


def with_workers(spec, workers: int | None):
    """spec with `--workers N` applied; N must be at least 1 and at most every point's concurrency."""
    import dataclasses

    from harness.errors import HarnessError

    if workers is None:
        return spec
    low = min(p.concurrency for p in spec.points())
    if workers < 1 or workers > low:
        raise HarnessError(
            f"--workers: expected 1 to {low} (the lowest concurrency of {spec.name}), got {workers}"
        )
    return dataclasses.replace(spec, workers=workers)
