"""Run one sweep point x seed against a live server and write its capture folder.

Per point: flush the cache -> metrics-before.prom -> telemetry on -> load -> telemetry off ->
metrics-after.prom -> point.json (atomic, last, also on Ctrl-C).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import signals
from harness.capture import POINT, REQUESTS, point_dir, point_name
from harness.capture.files import write_json_atomic
from harness.capture.points import count_requests, move_aside
from harness.capture.records import PointRecord
from harness.engines import TIMELINE_WATCH
from harness.loadgen.loop import run as run_loop
from harness.loadgen.run import RunIds, run_schedule
from harness.loadgen.split import run_split
from harness.spec import ExperimentSpec, Point
from harness.sweep.stall import stall_record
from harness.telemetry.timeline import DEFAULT_INTERVAL_S, metrics_timeline
from harness.workloads import PromptMaker, build_schedule

if TYPE_CHECKING:
    from harness.servers.server import Server

# warm-up requests are drawn like the measured ones from a seed this far apart: other prompt text, so
# they warm the server without caching a measured prefix
WARMUP_SEED_OFFSET = 1_000_003
Telemetry = Callable[[Path], Any]  # (point_dir) -> context manager whose __enter__ has .status


def point_status(
    ok: int, failed: int, scheduled: int, max_failed_fraction: float, skipped: int = 0, not_sent: int = 0
) -> str:
    """ok when every request sent succeeded (a run cut by duration_s sends fewer: still ok); partial
    while failures and the turns they skipped stay within the spec's allowance."""
    bad = failed + skipped
    if bad == 0 and ok + not_sent == scheduled and ok:
        return "ok"
    if ok == 0:
        return "failed"
    return "partial" if bad / max(scheduled, 1) <= max_failed_fraction else "failed"


def run_point(
    spec: ExperimentSpec,
    point: Point,
    seed: int,
    *,
    server: Server,
    server_name: str,
    node: str,
    capture_root: Path,
    quiet: bool = True,
    telemetry: Telemetry | None = None,
    attempt: int = 1,
    prompt_maker: PromptMaker | None = None,
    cold_note: str | None = None,
    metrics_interval_s: float | None = DEFAULT_INTERVAL_S,
) -> PointRecord:
    """One point x seed: its folder, requests.jsonl and point.json (written last, also on Ctrl-C).

    The cache is reset first (`server.flush`: the engine's reset endpoint, behind a gateway through it or
    each worker's); point.json records what happened (`flushed`, `flush_note`, `fresh_server`: a point on a
    server started for it is cold without a reset); whether the point began cold is judged by the summary
    (harness.verdicts.cold), with the server's block size, not here. `server.scrape` reads its counters
    (every worker's and the gateway's behind one: harness.servers.replicas)."""
    base_url = server.base_url
    fresh_server = server.fresh
    pname = point_name(point.sweep, seed)
    pdir = point_dir(Path(capture_root), node, spec.name, server_name, pname)
    pdir.mkdir(parents=True, exist_ok=True)
    move_aside(pdir)
    schedule = build_schedule(
        spec, point.workload, seed, prompt_maker
    )  # tokenizing happens here, not mid-run
    headers = spec.resolved_headers()
    ids = RunIds(spec.name, server_name, pname, seed)
    if spec.load.warmup_requests:  # before the point's window and its flush: in no figure or hit rate
        warm = build_schedule(spec, point.workload, seed + WARMUP_SEED_OFFSET, prompt_maker)
        no_limit = dataclasses.replace(spec.load, duration_s=None)  # all N warm-up requests are sent
        run_loop(
            run_schedule(
                warm.head(spec.load.warmup_requests),
                **{**_load_args(spec, point, base_url, pdir, ids, headers), "load": no_limit},
                warmup=True,
                label=f"{server_name} {pname} warm-up",
                quiet=quiet,
            )
        )
    start_mono, start_wall = time.monotonic(), time.time()
    flushed: bool | None = None
    note: str | None = cold_note  # made cold another way (harness.sweep.cold_start): no flush
    if cold_note is None:
        flushed, note = server.flush(headers)
    server.scrape(pdir, "before", headers)
    status: str = "failed"
    failure: str | None = None
    res = tel = None
    stall: dict[str, Any] | None = None
    stopped = KeyboardInterrupt()
    try:
        with (
            telemetry(pdir) if telemetry else contextlib.nullcontext(None) as tel,
            metrics_timeline(
                pdir, server.metrics_sources(), metrics_interval_s, headers, watch=TIMELINE_WATCH
            ),
        ):
            if spec.workers > 1:  # N processes, each its part of the same schedule (harness.loadgen.split)
                res = run_split(
                    spec,
                    point.workload,
                    seed,
                    spec.workers,
                    **_load_args(spec, point, base_url, pdir, ids, headers),
                    scheduled=len(schedule),
                    quiet=quiet,
                    label=f"{server_name} {pname}",
                )
            else:
                res = run_loop(
                    run_schedule(
                        schedule,
                        **_load_args(spec, point, base_url, pdir, ids, headers),
                        quiet=quiet,
                        label=f"{server_name} {pname}",
                    )
                )
        status = point_status(
            res.ok, res.failed, res.scheduled, spec.max_failed_fraction, res.skipped, res.not_sent
        )
        if status != "ok":
            failure = (
                ", ".join(f"{k}: {v}" for k, v in sorted(res.errors.items())) or "requests not completed"
            )
        if res.stall is not None:  # the watchdog cut the run: failed at once, with its evidence
            status, failure, stall = (
                "failed",
                res.stall.reason(),
                stall_record(res.stall, server.own_pid, pdir),
            )
    except KeyboardInterrupt as e:
        # point.json says "interrupted" (so resume re-runs it), then the interrupt goes on up, naming its signal
        status, failure, res, stopped = "interrupted", "interrupted by the user (Ctrl-C)", None, e
    with signals.deferred():  # the point's counters and point.json, never cut in half by a stop signal
        if res is not None:
            if server.settle_s > 0:  # the server's periodic stats line that covers the point's end
                time.sleep(server.settle_s)
            server.scrape(pdir, "after", headers)
        telemetry_status = getattr(tel, "status", None)  # read after the sampler stopped: its last word
        counts = count_requests(pdir)
        rec = PointRecord(
            experiment=spec.name,
            server=pdir.parent.name,
            point=pname,
            seed=seed,
            sweep=dict(point.sweep),
            status=status,  # type: ignore[arg-type]
            requests_scheduled=len(schedule),
            requests_ok=counts.ok,
            requests_failed=counts.failed,
            errors=counts.errors,
            start_mono=start_mono,
            end_mono=time.monotonic(),
            start_wall=start_wall,
            end_wall=time.time(),
            flushed=flushed,
            flush_note=note,
            attempt=attempt,
            failure=failure,
            telemetry_status=telemetry_status,
            fresh_server=fresh_server and not spec.load.warmup_requests,  # warm-up requests came first
            requests_skipped=counts.skipped,
            requests_not_sent=counts.not_sent,
            requests_warmup=counts.warmup,
            time_limited=bool(res is not None and res.time_limited),
            workers=server.worker_urls(),
            stall=stall,
            client=[c.to_dict() for c in res.processes] if res is not None and res.processes else None,
        )
        write_json_atomic(pdir / POINT, rec.to_dict())
    if status == "interrupted":
        raise stopped
    return rec


def _load_args(
    spec: ExperimentSpec, point: Point, base_url: str, pdir: Path, ids: RunIds, headers: dict[str, str]
) -> dict[str, Any]:
    """run_schedule's arguments shared by a point's warm-up and measured runs."""
    return {
        "base_url": base_url,
        "api": spec.api,
        "model": spec.model,
        "concurrency": point.concurrency,
        "out_path": pdir / REQUESTS,
        "ids": ids,
        "request_rate": point.request_rate,
        "load": spec.load,
        "headers": headers,
        "timeouts": spec.timeouts,
    }
