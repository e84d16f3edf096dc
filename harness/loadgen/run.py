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
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.capture.files import JsonlWriter
from harness.capture.records import RequestRecord
from harness.client import get_dialect, stream_request
from harness.client.dialects import normalize_base_url, with_priority
from harness.client.http1 import H1Pool
from harness.loadgen.due import DueQueue
from harness.loadgen.engine import pick_engine as _pick_engine
from harness.loadgen.part import Part
from harness.loadgen.progress import Progress
from harness.loadgen.sessions import Session, trace_due
from harness.loadgen.stall import drive as _drive
from harness.loadgen.tally import LoadResult, RunIds
from harness.loadgen.turn_feed import TurnFeed, cached
from harness.protocol.lockstep import HEADER as LOCKSTEP_HEADER
from harness.protocol.lockstep import ClientHint
from harness.spec import Timeouts
from harness.spec.load import LoadSettings
from harness.workloads import PromptBuilder, Schedule
from harness.workloads.arrivals import iter_arrival_offsets
from harness.workloads.schedule import Conversation, Request
from harness.workloads.spilled_sessions import SpilledSessions

if TYPE_CHECKING:
    import aiohttp

_mono = time.monotonic
__all__ = ["LoadResult", "RunIds", "run_schedule"]
FEED_WINDOW = 64  # a trace's conversations queued ahead of the workers (at least 2 x concurrency)


def _first(c: Conversation) -> int:
    return c.turns[0].index


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
    run = _Run(
        schedule, url, api, model, ids, request_rate, load or LoadSettings(), warmup, hdrs, timeouts, part
    )
    run.start_at = start_mono
    run.concurrency = concurrency
    writer = run.writer = JsonlWriter(out_path)
    res = run.res
    progress = None if quiet else Progress(label or ids.point, res.scheduled)
    cpu0 = time.process_time()
    try:
        run.start()
        if engine == "http1":
            pool = H1Pool(url, hdrs, connect_timeout=timeouts.connect)
            try:
                await _drive(pool, run, concurrency, progress)
            finally:
                await pool.close()
        else:
            from harness.client import aio  # aiohttp: imported by this engine's runs only (~0.3 s of CPU)

            run.client_timeout = aio.connect_timeout(timeouts.connect)
            async with aio.new_session(concurrency + 8, run.client_timeout) as session:
                await _drive(session, run, concurrency, progress)
    finally:
        run.stop()
        res.end_mono, res.end_wall = _mono(), time.time()
        res.client_cpu_s = time.process_time() - cpu0
        writer.close()
    return res


class _Run:
    """One run's shared state; its workers send, record and queue each session's next turn."""

    def __init__(
        self,
        schedule: Schedule,
        url: str,
        api: str,
        model: str,
        ids: RunIds,
        request_rate: float | None,
        load: LoadSettings,
        warmup: bool,
        headers: dict[str, str],
        timeouts: Timeouts,
        part: Part | None = None,
    ) -> None:
        self.part = part or Part(0, 1)
        self.start_at: float | None = None
        self.schedule, self.url, self.api, self.model, self.ids = schedule, url, api, model, ids
        self.rate, self.load, self.warmup, self.headers, self.timeouts = (
            request_rate,
            load,
            warmup,
            headers,
            timeouts,
        )
        self.dialect = get_dialect(api, load.ignore_eos)
        self.builder = PromptBuilder(schedule, api)
        # a replayed trace (schedule.total set) is fed from its file a window ahead of the workers, so the
        # run's memory does not grow with the trace; multi-turn: below; the rest are queued whole at the start
        convs = schedule.conversations
        spilled = isinstance(convs, SpilledSessions)  # a multi-turn schedule (its prompts in a file)
        think = load.think_time
        # closed loop, no think time: fed in index order, idle sessions spilled (harness.loadgen.turn_feed)
        closed = not request_rate and (think is None or think.mean_s <= 0)
        self.turns = (
            TurnFeed(convs, self.part, think) if closed and isinstance(convs, SpilledSessions) else None
        )
        # open loop: a multi-turn schedule's first turns are fed like a trace's (in arrival order)
        self.lazy = schedule.total is not None or (spilled and bool(request_rate))
        self.firsts = 0 if spilled and self.lazy else None  # open loop, multi-turn: first turns waiting
        self._feed = self.part.feed(schedule) if self.lazy else None
        self.unfed = len(schedule) if self.lazy else 0  # requests of conversations not yet queued
        self.window = FEED_WINDOW
        self.timed = False  # a trace's own send times (timestamps: honor) make this an open loop
        mine = self.part.mine
        # every conversation in first-turn order (open loop: each one draws its arrival time, whoever sends it)
        eager = not (self.lazy or self.turns)
        self._firsts = sorted((c for c in schedule.conversations if c.turns), key=_first) if eager else []
        self.sessions = {c.id: Session(cached(c)) for c in self._firsts if mine(c)}
        self.res = LoadResult(scheduled=self.part.count(schedule))
        self.client_timeout: aiohttp.ClientTimeout | None = None  # the aiohttp engine's (set when it is used)
        self.recent_ttft: deque[float] = deque(maxlen=512)
        self.in_flight = 0
        self.live: dict[
            int, RequestRecord
        ] = {}  # in flight, watched by the stall watchdog (harness.loadgen.stall)
        self.last_done = 0.0  # when a request last ended: an ending is progress too
        self.concurrency = 1
        self.time_up = False
        self.run_id = uuid.uuid4().hex[:12]  # the lockstep header's run name
        self.seq = 0  # requests sent so far
        self.followed = 0  # requests sent with follow=True that ended well, their next turn queued
        self.t0 = 0.0  # the run's start (time.monotonic)
        self.offsets: Iterator[float] | None = None  # open loop: the arrival process, drawn as they queue
        self.next_offset: float | None = None  # the next conversation's arrival offset (drawn one ahead)
        self.writer: JsonlWriter
        self.queue: DueQueue
        self._deadline: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------ schedule
    def start(self) -> None:
        """Queue each conversation's first turn (by arrival time with a rate) and arm duration_s."""
        res = self.res
        now = _mono()
        t0 = res.start_mono = self.start_at if self.start_at is not None else now
        res.start_wall = time.time() - (now - t0)
        self.queue = DueQueue()
        self.t0 = t0
        if self.rate:
            self.offsets = iter_arrival_offsets(
                self.rate, self.schedule.seed, self.load.arrival, self.load.burstiness
            )
            self.next_offset = next(self.offsets)
        if self.lazy or self.turns:
            self.window = max(FEED_WINDOW, 2 * self.concurrency)
            self._top_up()
        n = len(self._firsts)
        for k, conv in enumerate(self._firsts):
            s = self.sessions.get(conv.id)
            if self.offsets is not None:
                offset, nxt = self._draw(last=k == n - 1)
                if s is not None:
                    s.offset, s.next_offset, s.due = offset, nxt, t0 + offset
            elif s is not None:
                s.due = trace_due(conv.turns[0], self.t0, None, None)
            if s is not None:
                self.queue.put(s, conv.turns[0].index, s.due)
        self._firsts = []
        if self.load.duration_s is not None:
            loop = asyncio.get_running_loop()
            self._deadline = loop.call_later(self.load.duration_s, self._time_is_up)
        self._settle()

    def stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        if self.turns is not None:
            self.turns.close()

    def _time_is_up(self) -> None:
        """duration_s reached: nothing more is sent; what is queued is recorded as not sent."""
        self.time_up = self.res.time_limited = True
        self.drop_queued("time-limit", f"not sent: duration_s ({self.load.duration_s:g} s) ran out")

    def drop_queued(self, why: str, text: str) -> None:
        """Record every turn not yet sent as not sent (duration_s ran out, or the run stalled)."""
        for s in self.queue.drain():
            self._not_sent(s, why, text)
        for reqs in self.turns.unsent() if self.turns else ():  # idle sessions the feed has not reached
            self._unsent(reqs, why, text)
        for conv in self._feed or ():  # a trace's conversations not yet read
            self.unfed -= len(conv.turns)
            if self.part.mine(conv):
                self._not_sent(Session(conv), why, text)
        self._settle()

    def _top_up(self) -> None:
        """Queue a trace's next conversations until `window` wait untaken (or the file is done)."""
        if self.turns is not None:
            while not self.time_up and self.queue.waiting() < self.window:
                got = self.turns.next()
                if got is None:
                    return
                self.sessions[got[0].conv.id] = got[0]
                self.queue.put(got[0], got[1], None)
            return
        if self._feed is None or self.time_up:
            return
        while (self.queue.waiting() if self.firsts is None else self.firsts) < self.window:
            conv = next(self._feed, None)
            if conv is None:
                self._feed = None
                return
            if not conv.turns:
                continue
            self.unfed -= len(conv.turns)
            first = conv.turns[0]
            offset = nxt = None
            if first.arrival is None and self.offsets is not None:
                offset, nxt = self._draw(last=self.unfed <= 0)
            if not self.part.mine(conv):
                continue  # another worker's (its arrival time drawn all the same: one clock for all)
            s = Session(cached(conv))
            self.sessions[conv.id] = s
            if self.firsts is not None:
                self.firsts += 1
            if first.arrival is not None:  # the trace's own time (timestamps: honor), over speedup
                self.timed = True
                s.due = trace_due(first, self.t0, None, None)
            elif offset is not None:
                s.offset, s.next_offset, s.due = offset, nxt, self.t0 + offset
            self.queue.put(s, first.index, s.due)

    def _draw(self, last: bool) -> tuple[float, float | None]:
        """The arrival process's next time and, for the sim's hint, the one after it (None for the last)."""
        assert self.offsets is not None and self.next_offset is not None
        offset = self.next_offset
        self.next_offset = next(self.offsets)
        return offset, None if last else self.next_offset

    def _next(self, s: Session, done_mono: float) -> None:
        """After a turn ended well: queue the session's next turn, due after the think time."""
        if self.turns is not None and not self.time_up and self.turns.ahead(s):  # off the heap till fed
            self.turns.park(s)
            del self.sessions[s.conv.id]
            return
        req = s.next_turn()
        if req is None:
            self._over(s)  # its answers are on disk: memory stays flat in run length
            return
        if self.time_up:
            self._not_sent(s, "time-limit", f"not sent: duration_s ({self.load.duration_s:g} s) ran out")
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
            if self.firsts is not None and not s.history:
                self.firsts -= 1
            self._top_up()
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
                self._unsent(s.remaining()[1:], "stalled", f"not sent: {rec.error}")
                raise
            self._write(rec)
            raise
        finally:
            self.in_flight -= 1
            self.live.pop(id(rec), None)
            self.last_done = _mono()
        if rec.ttft_s is not None:
            self.recent_ttft.append(rec.ttft_s)
        self._write(rec)
        s.answered(rec, st.output_ids)
        if rec.ok:
            if hint.follow and not self.time_up:  # its next turn is queued at once: the sim counts it too
                self.followed += 1
            self._next(s, rec.done_mono or _mono())
        elif s.next_turn() is not None:
            kind = rec.error_kind or "failed"
            self._not_sent(s, "skipped", f"not sent: turn {req.turn} of this session failed ({kind})")
        else:
            self._over(s)
        self._settle()

    def _hint(self, s: Session, req: Request) -> ClientHint:
        """This loop as the sim's virtual clock needs it (harness.sim.lockstep): what is ready, whether this
        turn's end makes the next one ready at once, and (open loop, first turns) its arrival offsets."""
        offset = nxt = None
        if self.timed and req.turn in (0, None) and req.arrival is not None:
            offset, nxt = req.arrival, self._next_arrival(s.conv.id)
        elif s.offset is not None and req.turn in (0, None):
            offset, nxt = s.offset, s.next_offset
        think = self.load.think_time is not None and self.load.think_time.mean_s > 0
        if self.schedule.total is not None:  # a session trace's gap: not sent at once either
            think = think or any((t.gap or 0.0) > 0 for t in s.conv.turns[len(s.history) + 1 :][:1])
        return ClientHint(
            concurrency=self.concurrency,
            seq=self.seq,
            # a trace's conversations not yet read are ready too in a closed loop
            ready=self.queue.ready_count()
            + (self.unfed if not (self.rate or self.timed) else 0)
            + (self.turns.ready_unfed if self.turns else 0),
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

    def _not_sent(self, s: Session, why: str, text: str) -> None:
        """Record every remaining turn of s as not sent; the session is done."""
        self._unsent(s.remaining(), why, text)
        self._over(s)

    def _unsent(self, reqs: Sequence[Request], why: str, text: str) -> None:
        for req in reqs:
            rec = self._record(req, scheduled=0.0)
            rec.not_sent, rec.error = why, text
            self._write(rec)

    def _over(self, s: Session) -> None:
        """s has no turn left to send."""
        self.sessions.pop(s.conv.id, None)
        if self.turns is not None:
            self.turns.done(s.conv.id)

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
