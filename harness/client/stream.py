"""One streaming request, stamped onto a RequestRecord, over the run's shared connections.

Two engines carry the bytes: the lean HTTP/1.1 client (harness.client.http1, plain http://) and an
aiohttp session (https:// or when asked; harness.client.aio). Both hand body bytes to the same
EventSink (harness.client.events), so parsing, stamps and verdicts (harness.client.verdict) are identical.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING

from harness.capture.records import RequestRecord
from harness.client.dialects import Dialect, StreamState
from harness.client.events import EventSink, loop_time_at
from harness.client.h1wire import ROUTED_WORKER_HEADER
from harness.client.http1 import H1ConnectError, H1Disconnect, H1Error, H1Pool
from harness.client.verdict import ERROR_TEXT_MAX, classify, derive, fail, judge, take_usage

if TYPE_CHECKING:
    import aiohttp

_mono = time.monotonic
# what ends an exchange early and becomes an error kind; anything else is a bug and propagates
_H1_ERRORS: tuple[type[Exception], ...] = (TimeoutError, H1ConnectError, H1Error)


def _exchange_errors() -> tuple[type[Exception], ...]:
    """_H1_ERRORS, and aiohttp's once something imported it (only its engine does: ~0.3 s of CPU at start)."""
    aiohttp = sys.modules.get("aiohttp")
    return _H1_ERRORS if aiohttp is None else (*_H1_ERRORS, aiohttp.ClientError)


async def stream_request(
    session: aiohttp.ClientSession | H1Pool,
    url: str,
    dialect: Dialect,
    body: bytes,
    rec: RequestRecord,
    *,
    headers: dict[str, str] | None = None,
    extra_headers: dict[str, str] | None = None,
    first_token_timeout: float = 300.0,
    total_timeout: float = 600.0,
    timeout: aiohttp.ClientTimeout | None = None,
) -> StreamState:
    """Send one request and fill rec's stamps, usage and verdict; never raises except CancelledError.

    rec.scheduled_mono (TTFT starts there) is the send time when unset (0). With an H1Pool, its own
    headers are sent (`headers` is for the aiohttp session only);
    `extra_headers` go with this request on either engine (e.g. the sim's lockstep header).
    """
    st = StreamState()
    rec.sent_mono = sent = _mono()
    if not rec.scheduled_mono:  # no schedule (a closed loop): the clock starts at the send
        rec.scheduled_mono = sent
    rec.start_wall = time.time()
    total_at = sent + total_timeout if total_timeout > first_token_timeout else None
    first_at = sent + min(first_token_timeout, total_timeout)
    try:
        if isinstance(session, H1Pool):
            sink = await _via_h1(session, url, body, rec, dialect, st, first_at, total_at, extra_headers)
        else:
            hdrs = {**(headers or {}), **extra_headers} if extra_headers else headers
            sink = await _via_aiohttp(session, url, body, hdrs, timeout, rec, dialect, st, first_at, total_at)
        if sink is not None:  # the body ended cleanly with a 200
            take_usage(rec, st)
            st.event_tokens = rec.event_tokens = sink.event_tokens()
            judge(rec, st, sink.first_bytes)
    except _exchange_errors() as e:  # evaluated only when something was raised
        rec.done_mono = _mono()
        fail(rec, *classify(e, rec, first_token_timeout, total_timeout))
    finally:
        if st.pieces or st.reasoning:
            rec.answer = st.answer()
        if st.output_ids is not None:
            rec.answer_ids = list(st.output_ids)
        derive(rec)
    return st


async def _via_h1(
    pool: H1Pool,
    url: str,
    body: bytes,
    rec: RequestRecord,
    dialect: Dialect,
    st: StreamState,
    first_at: float,
    total_at: float | None,
    extra: dict[str, str] | None = None,
) -> EventSink | None:
    """The exchange on the lean engine; the sink when a 200 body ended cleanly, else None (recorded).

    Deadlines are kept by the pool's watchdog, not a timer per request.
    """
    sink = EventSink(rec, dialect, st, None, total_at)
    if not await _h1_exchange(pool, url, body, sink, loop_time_at(first_at), extra):
        return None
    if sink.status != 200:
        fail(rec, "http", sink.error_text())
        return None
    return sink


async def _h1_exchange(
    pool: H1Pool, url: str, body: bytes, sink: EventSink, deadline: float, extra: dict[str, str] | None = None
) -> bool:
    """One exchange on a pooled connection; False when the sink stopped it (failure recorded).

    A reused connection the server had already closed (keep-alive timeout) fails before any byte
    arrives; that one case is retried once on a new connection (never another pooled one, which may
    be just as stale).
    """
    request = pool.request_bytes(url, body, extra)
    conn = None
    try:
        for attempt in (0, 1):
            conn, reused = await pool.acquire(fresh=attempt == 1)
            sink.tmo = conn  # the first token moves the connection's deadline (conn.reschedule)
            try:
                return await conn.start(request, sink, deadline)
            except H1Disconnect as e:
                if attempt == 0 and reused and not e.got_bytes:
                    pool.release(conn)
                    conn = None
                    continue
                raise
        raise AssertionError("unreachable")
    finally:
        if conn is not None:
            pool.release(conn)  # drops it unless the response ended cleanly on a keep-alive connection


async def _via_aiohttp(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str] | None,
    timeout: aiohttp.ClientTimeout | None,
    rec: RequestRecord,
    dialect: Dialect,
    st: StreamState,
    first_at: float,
    total_at: float | None,
) -> EventSink | None:
    """The exchange on an aiohttp session; the sink when a 200 body ended cleanly, else None (recorded)."""
    from harness.client import aio

    async with asyncio.timeout_at(loop_time_at(first_at)) as tmo:
        sink = EventSink(rec, dialect, st, tmo, total_at)
        async with aio.post(session, url, body, headers, timeout) as resp:
            rec.http_status = resp.status
            routed = resp.headers.get(ROUTED_WORKER_HEADER.decode())
            if routed:
                rec.worker = routed
            if resp.status != 200:
                text = await resp.text(errors="replace")
                rec.done_mono = _mono()
                fail(rec, "http", f"HTTP {resp.status}: {text.strip()[:ERROR_TEXT_MAX]}")
                return None
            content = resp.content
            feed = sink.body
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                if not feed(chunk, _mono()):
                    return None
            sink.end(_mono())
    return sink
