"""Replay a Schedule against a live server: exact concurrency cap, optional Poisson arrivals, records to disk.

`concurrency` workers share one aiohttp session; each takes the ready request with the lowest schedule
index (a session's next turn becomes ready only when its previous turn finished). With a request rate,
arrival k is due at start + the k-th seeded exponential offset (absolute times, so nothing drifts);
TTFT starts at that due time, so queueing behind the cap is measured, not hidden. Every request
carries the X-Harness-Lockstep header (harness.sim.lockstep: this loop's state), with which serve-sim
holds its virtual clock for requests the loop owes it; other servers ignore the header.

Plain http:// servers are spoken to by the lean HTTP/1.1 client (harness.client.http1); https://, or
engine="aiohttp" (env HARNESS_HTTP_ENGINE=aiohttp), uses one shared aiohttp session instead.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import statistics
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from harness.capture.files import JsonlWriter
from harness.capture.records import RequestRecord
from harness.client import get_dialect, stream_request
from harness.client.http1 import H1Pool
from harness.errors import HarnessError
from harness.sim.lockstep import HEADER as LOCKSTEP_HEADER
from harness.sim.lockstep import ClientHint
from harness.spec import Timeouts
from harness.workloads import PromptBuilder, Schedule
from harness.workloads.arrivals import arrival_offsets
from harness.workloads.prompts import Turnout


@dataclass
class RunIds:
    """Identity fields copied into every record."""

    experiment: str
    server: str
    point: str
    seed: int


@dataclass
class LoadResult:
    scheduled: int
    sent: int = 0
    ok: int = 0
    failed: int = 0
    errors: Counter = field(default_factory=Counter)
    max_in_flight: int = 0
    start_mono: float = 0.0
    end_mono: float = 0.0
    start_wall: float = 0.0
    end_wall: float = 0.0
    interrupted: bool = False


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


async def run_schedule(
    schedule: Schedule,
    *,
    base_url: str,
    api: str,
    model: str,
    concurrency: int,
    out_path: Path,
    ids: RunIds,
    request_rate: float | None = None,
    headers: dict[str, str] | None = None,
    timeouts: Timeouts | None = None,
    quiet: bool = True,
    label: str = "",
    engine: str = "auto",
) -> LoadResult:
    """Run every request of the schedule; each finished one becomes a line of out_path.

    On cancellation (Ctrl-C) in-flight requests are recorded with error_kind "cancelled", the file is
    closed cleanly, and CancelledError propagates. engine: "auto" (http1 for http://), "http1", "aiohttp".
    """
    timeouts = timeouts or Timeouts()
    dialect = get_dialect(api)
    url = normalize_base_url(base_url) + dialect.path
    builder = PromptBuilder(schedule, api)
    hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream", **(headers or {})}
    convs = {c.id: c for c in schedule.conversations}
    total = len(schedule)
    res = LoadResult(scheduled=total)
    history: dict[int, list[Turnout]] = {c.id: [] for c in schedule.conversations}
    ready: list[tuple[int, int]] = [(c.turns[0].index, c.id) for c in schedule.conversations if c.turns]
    heapq.heapify(ready)
    changed = asyncio.Event()
    state = {"taken": 0, "in_flight": 0, "arrival": 0, "seq": 0, "followed": 0}
    run_id = uuid.uuid4().hex[:12]
    offsets = arrival_offsets(total, request_rate, schedule.seed) if request_rate else None
    recent_ttft: deque[float] = deque(maxlen=512)
    client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect, sock_read=None)
    engine = _pick_engine(engine, url, hdrs)
    writer = JsonlWriter(out_path)
    mono = time.monotonic
    res.start_mono, res.start_wall = mono(), time.time()
    t0 = res.start_mono

    async def next_item() -> tuple[int, int] | None:
        while not ready:
            if state["taken"] >= total:
                return None
            changed.clear()
            await changed.wait()
        if state["taken"] >= total:
            return None
        state["taken"] += 1
        return heapq.heappop(ready)

    async def worker(session: aiohttp.ClientSession | H1Pool) -> None:
        while state["taken"] < total:
            due = None
            k = -1
            if offsets is not None:
                k = state["arrival"]
                if k >= total:
                    return
                state["arrival"] = k + 1
                due = t0 + offsets[k]
                delay = due - mono()
                if delay > 0:
                    await asyncio.sleep(delay)
            item = await next_item()
            if item is None:
                return
            _, cid = item
            conv = convs[cid]
            hist = history[cid]
            req = conv.turns[len(hist)]
            scheduled = due if due is not None else mono()
            prompt = builder.build(conv, req, hist)
            rec = RequestRecord(
                experiment=ids.experiment,
                server=ids.server,
                point=ids.point,
                seed=ids.seed,
                index=req.index,
                group=req.group,
                session=req.session,
                turn=req.turn,
                position=req.position,
                api=api,
                scheduled_mono=scheduled,
                expected_prompt_tokens=prompt.expected_tokens,
                max_tokens=req.output_tokens,
                prompt_sha=prompt.sha,
            )
            body = dialect.body(model, prompt, req.output_tokens)
            state["seq"] += 1
            hint = ClientHint(  # the sim's virtual clock waits for what this loop owes it (sim/lockstep.py)
                concurrency=concurrency,
                seq=state["seq"],
                ready=len(ready),
                followed=state["followed"],
                follow=len(hist) + 1 < len(conv.turns),
                index=req.index,
                offset=offsets[k] if offsets is not None else None,
                next=offsets[k + 1] if offsets is not None and k + 1 < total else None,
                run=run_id,
            )
            state["in_flight"] += 1
            res.sent += 1
            if state["in_flight"] > res.max_in_flight:
                res.max_in_flight = state["in_flight"]
            try:
                st = await stream_request(
                    session,
                    url,
                    dialect,
                    body,
                    rec,
                    headers=hdrs,
                    extra_headers={LOCKSTEP_HEADER: hint.header()},
                    first_token_timeout=timeouts.first_token,
                    total_timeout=timeouts.total,
                    timeout=client_timeout,
                )
            except asyncio.CancelledError:
                rec.done_mono = mono()
                rec.ok, rec.error_kind, rec.error = False, "cancelled", "cancelled (interrupted)"
                _account(res, rec)
                writer.write(rec)
                raise
            finally:
                state["in_flight"] -= 1
            _account(res, rec)
            if rec.ttft_s is not None:
                recent_ttft.append(rec.ttft_s)
            writer.write(rec)
            hist.append(
                Turnout(
                    answer=rec.answer or "",
                    answer_ids=tuple(st.output_ids) if st.output_ids is not None else None,
                    completion_tokens=rec.completion_tokens,
                )
            )
            if len(hist) < len(conv.turns):
                heapq.heappush(ready, (conv.turns[len(hist)].index, cid))
                if rec.http_status == 200:  # the server ran it, so it counts the follow-up too
                    state["followed"] += 1
                changed.set()
            else:  # finished: its answers are on disk; dropping them keeps memory flat in run length
                del history[cid]
        changed.set()

    progress = None if quiet else _Progress(label or ids.point, total)
    try:
        if engine == "http1":
            pool = H1Pool(url, hdrs, connect_timeout=timeouts.connect)
            try:
                await _drive(pool, worker, concurrency, res, progress, recent_ttft)
            finally:
                await pool.close()
        else:
            connector = aiohttp.TCPConnector(limit=concurrency + 8, limit_per_host=0, ttl_dns_cache=300)
            async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:
                await _drive(session, worker, concurrency, res, progress, recent_ttft)
    finally:
        res.end_mono, res.end_wall = mono(), time.time()
        writer.close()
    return res


async def _drive(session, worker, concurrency: int, res: LoadResult, progress, recent_ttft: deque) -> None:
    """Run the workers (and the progress ticker); on cancellation cancel them all and wait for them."""
    loop = asyncio.get_running_loop()
    workers = [loop.create_task(worker(session)) for _ in range(concurrency)]
    ticker = loop.create_task(progress.run(res, recent_ttft)) if progress else None
    try:
        await asyncio.gather(*workers)
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit) as e:
        # KeyboardInterrupt here: a signal handler raised it inside a worker (it has already left the
        # loop); stop the rest the same way, and end cancelled rather than with an unretrieved error
        res.interrupted = True
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if not isinstance(e, asyncio.CancelledError):
            raise asyncio.CancelledError from e
        raise
    finally:
        if ticker:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            progress.finish(res, recent_ttft)


def _pick_engine(engine: str, url: str, headers: dict[str, str]) -> str:
    """http1 for plain http:// unless asked otherwise (or a header it cannot send); aiohttp for the rest."""
    engine = os.environ.get("HARNESS_HTTP_ENGINE", engine) if engine == "auto" else engine
    if engine not in ("auto", "http1", "aiohttp"):
        raise HarnessError(
            f"HTTP engine: unknown value {engine!r} (expected auto, http1 or aiohttp; env HARNESS_HTTP_ENGINE)"
        )
    if engine == "aiohttp" or not url.startswith("http://"):
        return "aiohttp"
    try:
        H1Pool(url, headers)
    except ValueError:
        return "aiohttp"
    return "http1"


def _account(res: LoadResult, rec: RequestRecord) -> None:
    if rec.ok:
        res.ok += 1
    else:
        res.failed += 1
        res.errors[rec.error_kind or "unknown"] += 1


class _Progress:
    """A rich bar refreshed 4x a second from a task, so drawing never runs per request."""

    def __init__(self, label: str, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}  TTFT p50 {task.fields[ttft]}"),
            TimeElapsedColumn(),
            auto_refresh=False,
            transient=False,
        )
        self.task = self.p.add_task(label, total=total, failed=0, ttft="-")
        self.p.start()

    def _update(self, res: LoadResult, ttfts: deque) -> None:
        ttft = f"{statistics.median(ttfts) * 1000:.1f} ms" if ttfts else "-"
        self.p.update(self.task, completed=res.ok + res.failed, failed=res.failed, ttft=ttft)
        self.p.refresh()

    async def run(self, res: LoadResult, ttfts: deque) -> None:
        while True:
            self._update(res, ttfts)
            await asyncio.sleep(0.25)

    def finish(self, res: LoadResult, ttfts: deque) -> None:
        self._update(res, ttfts)
        self.p.stop()
