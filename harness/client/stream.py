"""One streaming request, stamped onto a RequestRecord, over the run's shared connections.

Two engines carry the bytes: the lean HTTP/1.1 client (harness.client.http1, plain http://) and an
aiohttp session (https:// or when asked). Both hand body bytes to the same _Events sink, so parsing,
stamps and verdicts are identical. Times come from time.monotonic() once per received chunk; every
event in that chunk shares it.
"""

from __future__ import annotations

import asyncio
import json
import json.scanner
import time

import aiohttp

from harness.capture.records import RequestRecord
from harness.client.dialects import Dialect, StreamState
from harness.client.fastpath import TextTemplate, learn
from harness.client.http1 import H1ConnectError, H1Disconnect, H1Error, H1Pool
from harness.client.sse import SSEParser

_scan = json.scanner.c_make_scanner(json.JSONDecoder()) if json.scanner.c_make_scanner else None  # type: ignore[attr-defined]
_mono = time.monotonic
ERROR_TEXT_MAX = 500
ERROR_BODY_MAX = 4096
LEARN_TRIES = 3  # text events per stream tried as a fast-path template before giving up


class _Events:
    """Body bytes -> SSE events -> stream state and stamps; one per request, shared by both engines."""

    __slots__ = (
        "rec",
        "st",
        "feed",
        "parser",
        "dialect",
        "event",
        "tokens",
        "tmo",
        "total_at",
        "status",
        "err_body",
        "tpl",
        "tries",
    )

    def __init__(self, rec: RequestRecord, dialect: Dialect, st: StreamState, tmo, total_at: float | None):
        self.rec, self.st, self.dialect, self.event = rec, st, dialect, dialect.event
        self.tpl: TextTemplate | None = None
        self.tries = LEARN_TRIES if dialect.text_key else 0
        self.parser = SSEParser()
        self.feed = self.parser.feed
        self.tokens = rec.token_mono
        self.tmo = tmo  # asyncio.Timeout to push to the total deadline at the first token (or None)
        self.total_at = total_at
        self.status = 200
        self.err_body: list[bytes] = []

    def head(self, status: int, now: float) -> None:
        self.rec.http_status = self.status = status

    def body(self, chunk: bytes, now: float) -> bool:
        """Apply received bytes; False when the stream is unusable (the failure is already recorded)."""
        rec = self.rec
        if self.status != 200:
            if sum(map(len, self.err_body)) < ERROR_BODY_MAX:
                self.err_body.append(chunk)
            return True
        if rec.first_byte_mono is None:
            rec.first_byte_mono = now
        st = self.st
        tpl = self.tpl
        if tpl is not None:
            prefix, suffix, lp, ls = tpl.prefix, tpl.suffix, tpl.lp, tpl.ls
        for data in self.feed(chunk):
            # inlined TextTemplate.match: an event of a proven text shape is exact without a parse
            if tpl is not None and data.startswith(prefix) and data.endswith(suffix):
                mid = data[lp : len(data) - ls]
                if mid and b'"' not in mid and b"\\" not in mid:
                    try:
                        text = mid.decode()
                    except UnicodeDecodeError:
                        text = ""
                    if text.isprintable() and text:
                        st.pieces.append(text)
                        self.tokens.append(now)
                        continue
            if data == b"[DONE]":
                st.done = True
                continue
            try:
                obj = _parse(data)
            except ValueError:
                rec.done_mono = now
                _fail(rec, "protocol", f"malformed SSE data: {data[:120]!r}")
                return False
            if not isinstance(obj, dict):
                rec.done_mono = now
                _fail(rec, "protocol", f"SSE data is not a JSON object: {data[:120]!r}")
                return False
            n = len(st.pieces)
            try:
                is_token = self.event(st, obj)
            except (AttributeError, TypeError, KeyError, IndexError, ValueError):
                # a JSON object of an unexpected shape (e.g. "choices": "x") is the server's fault (issue 8)
                rec.done_mono = now
                _fail(rec, "protocol", f"SSE event of an unexpected shape: {data[:120]!r}")
                return False
            if is_token:
                self.tokens.append(now)
                if self.tries and tpl is None and len(st.pieces) == n + 1:
                    self.tries -= 1
                    self.tpl = tpl = learn(self.dialect, data, st.pieces[-1], _parse)
                    if tpl is not None:
                        prefix, suffix, lp, ls = tpl.prefix, tpl.suffix, tpl.lp, tpl.ls
                if rec.first_token_mono is None:
                    rec.first_token_mono = now
                    if self.total_at is not None:
                        self.tmo.reschedule(_loop_time_at(self.total_at))
        return True

    def end(self, now: float) -> None:
        self.rec.done_mono = now
        if self.status == 200:
            for data in self.parser.close():
                if data == b"[DONE]":
                    self.st.done = True

    def error_text(self) -> str:
        text = b"".join(self.err_body)[:ERROR_BODY_MAX].decode("utf-8", "replace")
        return f"HTTP {self.status}: {text.strip()[:ERROR_TEXT_MAX]}"


async def stream_request(
    session: aiohttp.ClientSession | H1Pool,
    url: str,
    dialect: Dialect,
    body: bytes,
    rec: RequestRecord,
    *,
    headers: dict[str, str] | None = None,
    first_token_timeout: float = 300.0,
    total_timeout: float = 600.0,
    timeout: aiohttp.ClientTimeout | None = None,
) -> StreamState:
    """Send one request and fill rec's stamps, usage and error; never raises except CancelledError.

    With an H1Pool, its own headers are sent (`headers` is for the aiohttp session only).
    """
    st = StreamState()
    rec.sent_mono = sent = _mono()
    rec.start_wall = time.time()
    total_at = sent + total_timeout if total_timeout > first_token_timeout else None
    first_at = sent + min(first_token_timeout, total_timeout)
    try:
        if isinstance(session, H1Pool):  # deadlines kept by the pool's watchdog, not a timer per request
            ev = _Events(rec, dialect, st, None, total_at)
            if not await _h1(session, url, body, ev, _loop_time_at(first_at)):
                return st
            if ev.status != 200:
                _fail(rec, "http", ev.error_text())
                return st
        else:
            async with asyncio.timeout_at(_loop_time_at(first_at)) as tmo:
                ev = _Events(rec, dialect, st, tmo, total_at)
                async with session.post(url, data=body, headers=headers, timeout=timeout) as resp:
                    rec.http_status = resp.status
                    if resp.status != 200:
                        text = await resp.text(errors="replace")
                        rec.done_mono = _mono()
                        _fail(rec, "http", f"HTTP {resp.status}: {text.strip()[:ERROR_TEXT_MAX]}")
                        return st
                    content = resp.content
                    feed = ev.body
                    while True:
                        chunk = await content.readany()
                        if not chunk:
                            break
                        if not feed(chunk, _mono()):
                            return st
                    ev.end(_mono())
    except TimeoutError:
        rec.done_mono = _mono()
        if rec.first_token_mono is None:
            _fail(rec, "timeout-first-token", f"no token within {first_token_timeout:g} s")
        else:
            _fail(rec, "timeout-total", f"not finished within {total_timeout:g} s")
        return st
    except H1ConnectError as e:
        rec.done_mono = _mono()
        if e.timed_out:
            _fail(rec, "timeout-connect", f"connect timed out: {e}")
        else:
            _fail(rec, "connect", f"cannot connect: {e}")
        return st
    except H1Disconnect as e:
        rec.done_mono = _mono()
        _fail(rec, "disconnect", f"connection lost mid-stream: {e}")
        return st
    except H1Error as e:
        rec.done_mono = _mono()
        _fail(rec, "protocol", f"bad HTTP response: {e}")
        return st
    except aiohttp.ServerTimeoutError as e:
        rec.done_mono = _mono()
        _fail(rec, "timeout-connect", f"connect timed out: {e}")
        return st
    except aiohttp.ClientConnectorError as e:
        rec.done_mono = _mono()
        _fail(rec, "connect", f"cannot connect: {e}")
        return st
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
        rec.done_mono = _mono()
        _fail(rec, "disconnect", f"connection lost mid-stream: {type(e).__name__}: {e}")
        return st
    except aiohttp.ClientError as e:
        rec.done_mono = _mono()
        _fail(rec, "protocol", f"{type(e).__name__}: {e}")
        return st
    finally:
        if st.pieces or st.reasoning:
            rec.answer = st.answer()
        _derive(rec)
    _finish(rec, st)
    return st


async def _h1(pool: H1Pool, url: str, body: bytes, ev: _Events, deadline: float) -> bool:
    """One exchange on a pooled connection; False when the sink stopped it (failure recorded).

    A reused connection the server had already closed (keep-alive timeout) fails before any byte
    arrives; that one case is retried once on a fresh connection.
    """
    request = pool.request_bytes(url, body)
    conn = None
    try:
        for attempt in (0, 1):
            conn, reused = await pool.acquire()
            ev.tmo = conn  # the first token moves the connection's deadline (conn.reschedule)
            try:
                return await conn.start(request, ev, deadline)
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


def _parse(data: bytes) -> object:
    """json.loads without its encoding sniffing and whitespace regexes (the per-event hot path)."""
    s = data.decode()
    if s[:1].isspace():
        s = s.strip()
    if _scan is None:
        return json.loads(s)
    try:
        obj, end = _scan(s, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    except RecursionError:  # deeply nested junk is a protocol error, not a crash of the run (issue 8)
        raise ValueError("JSON nested too deeply") from None
    if end != len(s) and s[end:].strip():
        raise ValueError("trailing data")
    return obj


def _loop_time_at(mono_deadline: float) -> float:
    """asyncio deadlines use loop.time(), which is time.monotonic() on the default loops; map anyway."""
    loop = asyncio.get_running_loop()
    return loop.time() + (mono_deadline - _mono())


def _fail(rec: RequestRecord, kind: str, text: str) -> None:
    rec.ok = False
    rec.error_kind = kind
    rec.error = text


def _finish(rec: RequestRecord, st: StreamState) -> None:
    """Copy usage and verdict into the record once the stream ended."""
    u = st.usage
    if u:
        rec.prompt_tokens = u.get("prompt_tokens")
        rec.completion_tokens = u.get("completion_tokens")
        details = u.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            rec.cached_tokens = details["cached_tokens"]
        elif u.get("cached_tokens") is not None:  # SGLang meta_info
            rec.cached_tokens = u["cached_tokens"]
        split = u.get("cached_tokens_details")
        if isinstance(split, dict):
            rec.cached_device = split.get("device")
            rec.cached_host = split.get("host")
    if st.timings:
        rec.server_timings = st.timings
        if rec.cached_tokens is None and isinstance(st.timings.get("cache_n"), int):
            rec.cached_tokens = st.timings["cache_n"]
    rec.finish_reason = st.finish
    if st.error:
        _fail(rec, "http", f"server error in stream: {st.error[:ERROR_TEXT_MAX]}")
    elif not (st.done or st.finish):
        _fail(rec, "disconnect", "stream ended before a finish_reason or [DONE]")
    elif rec.first_token_mono is None:
        _fail(rec, "protocol", "stream finished without any generated text")
    else:
        rec.ok = True


def _derive(rec: RequestRecord) -> None:
    """Convenience figures, re-derivable from the stamps."""
    if rec.first_token_mono is not None:
        rec.ttft_s = rec.first_token_mono - rec.scheduled_mono
        rec.ttft_sent_s = rec.first_token_mono - (rec.sent_mono or rec.scheduled_mono)
    if rec.done_mono is not None:
        rec.e2e_s = rec.done_mono - rec.scheduled_mono
