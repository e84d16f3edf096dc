"""One point's load from N worker processes (`workers: N`): more load than one core can drive.

Each worker rebuilds the same schedule from the spec and the seed (schedules are deterministic, and a
shared-prefix one is made lazily, so nothing is shipped between processes) and sends only its part:
the conversations whose group (else session) is its number modulo N, so a session's turns stay in
one process and in order. Arrival times are drawn for every conversation in every worker, on one
clock: absolute offsets from a common start (time.monotonic() is one clock for all processes here).
The concurrency cap is split exactly (c // N each, one more for the first c % N), so the sum never
exceeds it. Worker i appends its records to requests.w<i>.jsonl as they finish; when all have ended
the point's requests.jsonl is their concatenation, the file every later stage reads. A worker that
dies loses only its requests in flight: what it recorded is kept, and the missing requests make the
point partial, so a resumed sweep runs it again.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.loadgen.loop import run as run_loop
from harness.loadgen.part import Part
from harness.loadgen.progress import Progress
from harness.loadgen.run import LoadResult, run_schedule

START_LEAD_S = 2.0  # the common start is this far ahead of the spawn: every worker has imported by then
PIDS = "workers.pids"  # the worker processes' pids, one a line (for tests and for an operator's kill)


def shares(concurrency: int, workers: int) -> list[int]:
    """The cap split exactly: c // n each, one more for the first c % n."""
    if workers < 1 or workers > concurrency:
        raise HarnessError(
            f"workers: {workers} processes need a concurrency of at least {workers} (it is {concurrency})"
        )
    return [concurrency // workers + (1 if i < concurrency % workers else 0) for i in range(workers)]


def worker_file(out_path: Path, i: int) -> Path:
    return out_path.with_name(f"{out_path.stem}.w{i}{out_path.suffix}")


def run_split(
    spec: Any,
    workload: Any,
    seed: int,
    workers: int,
    *,
    concurrency: int,
    out_path: Path,
    scheduled: int,
    quiet: bool = True,
    label: str = "",
    **load_args: Any,
) -> LoadResult:
    """Run one point's schedule from `workers` processes; their records end up in out_path.

    scheduled: the schedule's length (the progress bar's total and the tally's). load_args: run_schedule's
    other keyword arguments (base_url, api, model, ids, request_rate, load,
    headers, timeouts, engine); they are pickled to each worker.
    """
    caps = shares(concurrency, workers)
    out_path = Path(out_path)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads (telemetry)
    results = ctx.Queue()
    start = time.monotonic() + START_LEAD_S
    procs = []
    for i, cap in enumerate(caps):
        wf = worker_file(out_path, i)
        wf.unlink(missing_ok=True)
        args = (spec, workload, seed, Part(i, workers), cap, wf, start, load_args, results)
        procs.append(ctx.Process(target=_worker, args=args, name=f"harness-load-{i}", daemon=True))
    for p in procs:
        p.start()
    (out_path.parent / PIDS).write_text("".join(f"{p.pid}\n" for p in procs))
    files = [worker_file(out_path, i) for i in range(workers)]
    got: dict[int, LoadResult] = {}
    progress = None if quiet else Progress(label or str(out_path.parent.name), scheduled)
    tally = _Tally(files)
    try:
        while any(p.is_alive() for p in procs) or not results.empty():
            while not results.empty():
                i, res = results.get()
                got[i] = res
            if progress is not None:
                progress._update(tally.read(), ())
            time.sleep(0.25)
    except KeyboardInterrupt:
        for p in procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: each worker records its in-flight requests as cancelled
        for p in procs:
            p.join(10)
        tally.read()
        _merge(files, out_path)
        raise
    finally:
        for p in procs:
            p.join(5)
        (out_path.parent / PIDS).unlink(missing_ok=True)
        if progress is not None:
            progress.finish(tally.read(), ())
    tally.read()
    _merge(files, out_path)
    return _combine(got, procs, tally, scheduled)


def _worker(
    spec: Any,
    workload: Any,
    seed: int,
    part: Part,
    cap: int,
    path: Path,
    start: float,
    load_args: dict[str, Any],
    results: Any,
) -> None:
    """One worker process: the same schedule, its part of it, from the common start."""
    from harness.workloads import build_schedule

    schedule = build_schedule(spec, workload, seed)
    delay = start - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    try:
        res = run_loop(
            run_schedule(
                schedule, concurrency=cap, out_path=path, part=part, start_mono=start, quiet=True, **load_args
            )
        )
    except KeyboardInterrupt:  # the parent's terminate() or the terminal's Ctrl-C: records are on disk
        return
    results.put((part.i, res))


class _Tally:
    """Finished requests so far, from the workers' record files (new bytes only; no parsing)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        self.pos = [0] * len(files)
        self.res = LoadResult(scheduled=0)
        self.per = [LoadResult(scheduled=0) for _ in files]  # each worker's, for one that died

    def read(self) -> LoadResult:
        for k, f in enumerate(self.files):
            try:
                with open(f, "rb") as fh:
                    fh.seek(self.pos[k])
                    new = fh.read()
            except FileNotFoundError:
                continue
            new = new[: new.rfind(b"\n") + 1]  # whole lines only
            self.pos[k] += len(new)
            done, ok, unsent = new.count(b"\n"), new.count(b'"ok":true'), new.count(b'"not_sent":"')
            for r in (self.res, self.per[k]):
                r.ok += ok
                r.not_sent += unsent
                r.failed += done - ok - unsent
        return self.res


def _merge(files: list[Path], out_path: Path) -> None:
    """Append the workers' records to out_path (whole lines; a killed worker's last partial line is dropped)."""
    with open(out_path, "ab") as out:
        for f in files:
            if not f.exists():
                continue
            carry = b""  # bytes after the last newline so far: written once their line is whole
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    data = carry + chunk
                    cut = data.rfind(b"\n") + 1
                    out.write(data[:cut])
                    carry = data[cut:]
            out.flush()
            os.fsync(out.fileno())
            f.unlink()


def _combine(got: dict[int, LoadResult], procs: list, tally: _Tally, scheduled: int) -> LoadResult:
    """The workers' results summed; a worker that died counts only what its records file holds."""
    total = LoadResult(scheduled=scheduled, errors=Counter())
    dead = [i for i in range(len(procs)) if i not in got]
    for r in [*got.values(), *(tally.per[i] for i in dead)]:
        for f in ("sent", "ok", "failed", "skipped", "not_sent", "client_cpu_s"):
            setattr(total, f, getattr(total, f) + getattr(r, f))
        total.errors.update(r.errors)
        total.processes += r.processes
        total.max_in_flight += r.max_in_flight  # an upper bound: the workers' peaks need not coincide
        total.interrupted |= r.interrupted
        total.time_limited |= r.time_limited
        if r.stall is not None and (total.stall is None or r.stall.since_mono < total.stall.since_mono):
            total.stall = r.stall  # the first part that stalled: its window and in-flight count
    starts = [r.start_mono for r in got.values()]
    total.start_mono = min(starts) if starts else 0.0
    total.end_mono = max((r.end_mono for r in got.values()), default=time.monotonic())
    total.start_wall = min((r.start_wall for r in got.values()), default=0.0)
    total.end_wall = max((r.end_wall for r in got.values()), default=time.time())
    if dead:
        total.errors.update({f"worker {i} died (exit {procs[i].exitcode})": 1 for i in dead})
    return total
