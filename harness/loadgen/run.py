"""run_schedule: every request of a Schedule sent under an exact concurrency cap, each record to disk.

`concurrency` workers share one connection pool and take requests from a DueQueue. Closed loop (no
request rate): a worker takes the ready request with the lowest schedule index; TTFT starts when it
is taken; a multi-turn schedule is then fed in index order, a session in RAM only while a turn of it
is queued or in flight (harness.loadgen.turn_feed). With `request_rate`, conversations (a shared-prefix
request, or a multi-turn session: first turns fed lazily in arrival order) start by the arrival
process (poisson, constant or gamma; seeded, on absolute times from the run start, so nothing drifts),
and TTFT starts at that due time, so queueing behind the cap is measured, not hidden.
A later turn of a session is due when the previous answer ended plus the think time (`think_time_s`);
with a rate, its TTFT starts there too. A replayed trace with `timestamps: honor` sends each request at
its own time (Request.arrival after the start), not before its previous turn ended; TTFT from there. A
session trace's later turn (Request.gap) is due its recorded gap after the previous answer was received.
A failed turn ends its session: the remaining turns are recorded as skipped. `duration_s` stops sending after that long: requests not yet sent are recorded
as not sent (time-limit); those in flight finish. Every record carries `late_s` = sent - scheduled,
the wait for a free slot under the cap (`slot_wait_s`) plus the client's own lateness. Every request carries the X-Harness-Lockstep header (harness.protocol.lockstep:
this loop's state), with which serve-sim holds its virtual clock for requests the loop owes it; other
servers ignore the header.

Plain http:// servers are spoken to by the lean HTTP/1.1 client (harness.client.http1); https://, or
engine="aiohttp" (env HARNESS_HTTP_ENGINE=aiohttp), uses one shared aiohttp session instead.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.capture.files import JsonlWriter
from harness.capture.records import RequestRecord
from harness.client import get_dialect, stream_request
from harness.client.dialects import normalize_base_url, with_priority
from harness.client.http1 import H1Pool
from harness.loadgen.client_load import LagMonitor
from harness.loadgen.due import DueQueue
from harness.loadgen.engine import pick_engine as _pick_engine
from harness.loadgen.feeders import Arrivals, Feeder, pick_feeder
from harness.loadgen.part import Part
from harness.loadgen.progress import Progress, RecentTtft
from harness.loadgen.sessions import Session, trace_due
from harness.loadgen.stall import drive as _drive
from harness.loadgen.tally import LoadResult, RunIds
from harness.protocol.lockstep import HEADER as LOCKSTEP_HEADER
from harness.protocol.lockstep import ClientHint
from harness.spec import Timeouts
from harness.spec.load import LoadSettings
from harness.workloads import PromptBuilder, Schedule
from harness.workloads.schedule import Request

if TYPE_CHECKING:
    import aiohttp

_mono = time.monotonic
__all__ = ["LoadResult", "RunIds", "run_schedule"]


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
    load: LoadSettings | None = None,
    warmup: bool = False,
    headers: dict[str, str] | None = None,
    timeouts: Timeouts | None = None,
    quiet: bool = True,
    label: str = "",
    engine: str = "auto",
    part: Part | None = None,
    start_mono: float | None = None,
) -> LoadResult:
    """Run every request of the schedule; each finished (or skipped) one becomes a line of out_path.

    load: arrival process, think time and duration (warm-up and SLOs are the caller's); warmup: mark
    every record as a warm-up one. On cancellation (Ctrl-C) in-flight requests are recorded with
    error_kind "cancelled", the file is closed cleanly, and CancelledError propagates.
    engine: "auto" (http1 for http://), "http1", "aiohttp". part: send only this worker's share of the
    conversations (harness.loadgen.split), with arrival times drawn for all of them, from `start_mono`
    (a time.monotonic() every worker shares) rather than from now.
    """
    timeouts = timeouts or Timeouts()
    url = normalize_base_url(base_url) + get_dialect(api).path
    hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream", **(headers or {})}
    engine = _pick_engine(engine, url, hdrs)
    client_timeout = None
    if engine != "http1":
        from harness.client import aio  # aiohttp: imported by this engine's runs only (~0.3 s of CPU)

        client_timeout = aio.connect_timeout(timeouts.connect)
    run = _Run(
        schedule,
        url=url,
        api=api,
        model=model,
        ids=ids,
        rate=request_rate,
        load=load or LoadSettings(),
        warmup=warmup,
        headers=hdrs,
        timeouts=timeouts,
        concurrency=concurrency,
        writer=JsonlWriter(out_path),
        part=part or Part(0, 1),
        start_at=start_mono,
        client_timeout=client_timeout,
    )
    res = run.res
    progress = None if quiet else Progress(label or ids.point, res.scheduled)
    cpu0, wall0 = time.process_time(), _mono()
    try:
        run.start()
        if engine == "http1":
            pool = H1Pool(url, hdrs, connect_timeout=timeouts.connect)
            try:
                await _drive(pool, run, concurrency, progress)
            finally:
                await pool.close()
        else:
            from harness.client import aio

            async with aio.new_session(concurrency + 8, client_timeout) as session:
                await _drive(session, run, concurrency, progress)
    finally:
        run.stop()
        res.end_mono, res.end_wall = _mono(), time.time()
        res.client_cpu_s = time.process_time() - cpu0
        res.processes = [run.lag.load(res.client_cpu_s, res.end_mono - wall0, res.sent)]
        run.writer.close()
    return res


class _Run:
    """One run's shared state; its workers send, record and queue each session's next turn. How
    conversations reach the queue is its feeder's business (harness.loadgen.feeders)."""

    def __init__(
        self,
        schedule: Schedule,
        *,
        url: str,
        api: str,
        model: str,
        ids: RunIds,
        rate: float | None,
        load: LoadSettings,
        warmup: bool,
        headers: dict[str, str],
        timeouts: Timeouts,
        concurrency: int,
        writer: JsonlWriter,
        part: Part,
        start_at: float | None,
        client_timeout: aiohttp.ClientTimeout | None,
    ) -> None:
        self.schedule, self.url, self.api, self.model, self.ids = schedule, url, api, model, ids
        self.rate, self.load, self.warmup, self.headers, self.timeouts = rate, load, warmup, headers, timeouts
        self.concurrency, self.writer, self.part, self.start_at = concurrency, writer, part, start_at
        self.client_timeout = client_timeout  # the aiohttp engine's; None with http1
        self.dialect = get_dialect(api, load.ignore_eos)
        self.builder = PromptBuilder(schedule, api)
        self.res = LoadResult(scheduled=part.count(schedule))
        self.queue = DueQueue()
        self.sessions: dict[int, Session] = {}  # conversations with a turn queued or in flight
        self.feeder: Feeder = pick_feeder(schedule, part, load, rate, concurrency, self.sessions)
        self.arrivals = Arrivals(rate, schedule.seed, load) if rate else None
        self.recent_ttft = RecentTtft(maxlen=512)
        self.lag = LagMonitor()  # sampled while the workers run (harness.loadgen.stall.drive)
        self.in_flight = 0
        self.live: dict[int, RequestRecord] = {}  # in flight, watched by the stall watchdog (loadgen.stall)
        self.last_done = 0.0  # when a request last ended: an ending is progress too
        self.time_up = False
        self.run_id = uuid.uuid4().hex[:12]  # the lockstep header's run name
        self.seq = 0  # requests sent so far
        self.followed = 0  # requests sent with follow=True that ended well, their next turn queued
        self.t0 = 0.0  # the run's start (time.monotonic), set by start()
        self._deadline: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------ schedule
    def start(self) -> None:
        """Fix the run's start, let the feeder queue the first turns, and arm duration_s."""
        res = self.res
        now = _mono()
        t0 = self.t0 = res.start_mono = self.start_at if self.start_at is not None else now
        res.start_wall = time.time() - (now - t0)
        self.feeder.start(self)
        if self.load.duration_s is not None:
            loop = asyncio.get_running_loop()
            self._deadline = loop.call_later(self.load.duration_s, self._time_is_up)
        self._settle()

    def stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self.feeder.close()

    def _time_is_up(self) -> None:
        """duration_s reached: nothing more is sent; what is queued is recorded as not sent."""
        self.time_up = self.res.time_limited = True
        self.drop_queued("time-limit", f"not sent: duration_s ({self.load.duration_s:g} s) ran out")

    def drop_queued(self, why: str, text: str) -> None:
        """Record every turn not yet sent as not sent (duration_s ran out, or the run stalled)."""
        for s in self.queue.drain():
            self.not_sent(s, why, text)
        self.feeder.drop_rest(self, why, text)
        self._settle()

    def _next(self, s: Session, done_mono: float) -> None:
        """After a turn ended well: queue the session's next turn, due after the think time."""
        if self.feeder.park(self, s):  # off the heap till the feeder reaches it
            return
        req = s.next_turn()
        if req is None:
            self._over(s)  # its answers are on disk: memory stays flat in run length
            return
        if self.time_up:
            self.not_sent(s, "time-limit", f"not sent: duration_s ({self.load.duration_s:g} s) ran out")
            return
        think = s.think(self.load.think_time, self.schedule.seed)
        s.due = done_mono + think if (self.rate or think) else None
        if req.arrival is not None or req.gap is not None:
            s.due = trace_due(req, self.t0, s.due if s.due is not None else done_mono, done_mono)
        self.queue.put(s, req.index, s.due)

    def _settle(self) -> None:
        """Every request accounted for: let the workers go."""
        r = self.res
        if r.ok + r.failed + r.skipped + r.not_sent >= r.scheduled:
            self.queue.close()

    # ------------------------------------------------------------ workers
    async def worker(self, session: aiohttp.ClientSession | H1Pool) -> None:
        queue = self.queue
        while True:
            s, idle = await queue.get()
            if s is None:
                return
            self.feeder.taken(self, s)
            await self._send(session, s, idle)

    async def _send(self, session: aiohttp.ClientSession | H1Pool, s: Session, idle: bool) -> None:
        """Send s's next turn. idle: a worker was free when it came due (else it waited for the cap)."""
        taken = _mono()
        req = s.next_turn()
        assert req is not None
        rec = self._record(req, 0.0, think_s=s.think_s)
        prompt = self.builder.build(s.conv, req, s.history)
        rec.expected_prompt_tokens, rec.prompt_sha = prompt.expected_tokens, prompt.sha
        body = self.dialect.body(self.model, prompt, req.output_tokens)
        if req.priority is not None:  # SGLang's `priority` (GenerateReqInput, the OpenAI requests alike)
            body = with_priority(body, req.priority)
        # with a rate TTFT starts at the due time (so building the prompt late is the client's lateness);
        # a closed loop has no schedule: stream_request starts TTFT at the send (late_s 0)
        timed = self.rate or req.arrival is not None or req.gap is not None
        rec.scheduled_mono = s.due if timed and s.due is not None else 0.0
        if rec.scheduled_mono:  # late_s = the wait for a free slot (the cap) + the client's own lateness
            rec.slot_wait_s = 0.0 if idle else max(0.0, taken - rec.scheduled_mono)
        res = self.res
        self.seq += 1
        hint = self._hint(s, req)
        self.in_flight += 1
        self.live[id(rec)] = rec
        res.sent += 1
        if self.in_flight > res.max_in_flight:
            res.max_in_flight = self.in_flight
        try:
            st = await stream_request(
                session,
                self.url,
                self.dialect,
                body,
                rec,
                headers=self.headers,
                extra_headers={LOCKSTEP_HEADER: hint.header()},
                first_token_timeout=self.timeouts.first_token,
                total_timeout=self.timeouts.total,
                timeout=self.client_timeout,
            )
        except asyncio.CancelledError:
            rec.done_mono = _mono()
            rec.ok, rec.error_kind, rec.error = False, "cancelled", "cancelled (interrupted)"
            if self.res.stall is not None:  # cut by the stall watchdog: its session's later turns unsent
                rec.error_kind, rec.error = "stalled", self.res.stall.reason()
                self._write(rec)
                self.unsent(s.remaining()[1:], "stalled", f"not sent: {rec.error}")
                raise
            self._write(rec)
            raise
        finally:
            self.in_flight -= 1
            self.live.pop(id(rec), None)
            self.last_done = _mono()
        self.recent_ttft.add(rec)  # the sim's modelled TTFT where its answers carry stamps
        self._write(rec)
        s.answered(rec, st.output_ids)
        if rec.ok:
            if hint.follow and not self.time_up:  # its next turn is queued at once: the sim counts it too
                self.followed += 1
            self._next(s, rec.done_mono or _mono())
        elif s.next_turn() is not None:
            kind = rec.error_kind or "failed"
            self.not_sent(s, "skipped", f"not sent: turn {req.turn} of this session failed ({kind})")
        else:
            self._over(s)
        self._settle()

    def _hint(self, s: Session, req: Request) -> ClientHint:
        """This loop as the sim's virtual clock needs it (harness.sim.lockstep): what is ready, whether this
        turn's end makes the next one ready at once, and (open loop, first turns) its arrival offsets."""
        offset = nxt = None
        if self.feeder.timed and req.turn in (0, None) and req.arrival is not None:
            offset, nxt = req.arrival, self._next_arrival(s.conv.id)
        elif s.offset is not None and req.turn in (0, None):
            offset, nxt = s.offset, s.next_offset
        think = self.load.think_time is not None and self.load.think_time.mean_s > 0
        if self.schedule.kind == "trace":  # a session trace's gap: not sent at once either
            think = think or any((t.gap or 0.0) > 0 for t in s.conv.turns[len(s.history) + 1 :][:1])
        return ClientHint(
            concurrency=self.concurrency,
            seq=self.seq,
            # a trace's conversations not yet read are ready too in a closed loop
            ready=self.queue.ready_count() + self.feeder.ready_unfed(),
            followed=self.followed,
            follow=len(s.history) + 1 < len(s.conv.turns) and not think,  # a think time: not at once
            index=req.index,
            offset=offset,
            next=nxt,
            run=self.run_id,
        )

    def _next_arrival(self, conv_id: int) -> float | None:
        """The send time of the next queued trace conversation (ids follow the file), if it is queued."""
        nxt = self.sessions.get(conv_id + 1)
        return nxt.conv.turns[0].arrival if nxt is not None and nxt.conv.turns else None

    # ------------------------------------------------------------ records
    def _record(self, req: Request, scheduled: float, think_s: float | None = None) -> RequestRecord:
        ids = self.ids
        return RequestRecord(
            experiment=ids.experiment,
            server=ids.server,
            point=ids.point,
            seed=ids.seed,
            index=req.index,
            group=req.group,
            session=req.session,
            turn=req.turn,
            position=req.position,
            api=self.api,
            scheduled_mono=scheduled,
            max_tokens=req.output_tokens,
            warmup=self.warmup,
            think_s=think_s,
            priority_class=req.priority_class,
        )

    def not_sent(self, s: Session, why: str, text: str) -> None:
        """Record every remaining turn of s as not sent; the session is done."""
        self.unsent(s.remaining(), why, text)
        self._over(s)

    def unsent(self, reqs: Sequence[Request], why: str, text: str) -> None:
        for req in reqs:
            rec = self._record(req, scheduled=0.0)
            rec.not_sent, rec.error = why, text
            self._write(rec)

    def _over(self, s: Session) -> None:
        """s has no turn left to send."""
        self.sessions.pop(s.conv.id, None)
        self.feeder.done(s.conv.id)

    def _write(self, rec: RequestRecord) -> None:
        res = self.res
        if rec.not_sent == "skipped":
            res.skipped += 1
        elif rec.not_sent:
            res.not_sent += 1
        elif rec.ok:
            res.ok += 1
        else:
            res.failed += 1
            res.errors[rec.error_kind or "unknown"] += 1
        self.writer.write(rec)
