"""One streaming request over the run's shared aiohttp session, stamped onto a RequestRecord.

Times come from time.monotonic() once per received chunk; every event in that chunk shares it.
"""

from __future__ import annotations

import asyncio
import json
import json.scanner
import time

import aiohttp

from harness.client.dialects import Dialect, StreamState
from harness.client.sse import SSEParser
from harness.records import RequestRecord

_scan = json.scanner.c_make_scanner(json.JSONDecoder()) if json.scanner.c_make_scanner else None  # type: ignore[attr-defined]
_mono = time.monotonic
ERROR_TEXT_MAX = 500


async def stream_request(
    session: aiohttp.ClientSession,
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
    """Send one request and fill rec's stamps, usage and error; never raises except CancelledError."""
    st = StreamState()
    rec.sent_mono = sent = _mono()
    rec.start_wall = time.time()
    tokens = rec.token_mono
    try:
        async with asyncio.timeout_at(_loop_time_at(sent + min(first_token_timeout, total_timeout))) as tmo:
            async with session.post(url, data=body, headers=headers, timeout=timeout) as resp:
                rec.http_status = resp.status
                if resp.status != 200:
                    text = await resp.text(errors="replace")
                    rec.done_mono = _mono()
                    _fail(rec, "http", f"HTTP {resp.status}: {text.strip()[:ERROR_TEXT_MAX]}")
                    return st
                parser = SSEParser()
                feed = parser.feed
                event = dialect.event
                content = resp.content
                first_tok = None
                while True:
                    chunk = await content.readany()
                    if not chunk:
                        break
                    now = _mono()
                    if rec.first_byte_mono is None:
                        rec.first_byte_mono = now
                    for data in feed(chunk):
                        if data == b"[DONE]":
                            st.done = True
                            continue
                        try:
                            obj = _parse(data)
                        except ValueError:
                            rec.done_mono = now
                            _fail(rec, "protocol", f"malformed SSE data: {data[:120]!r}")
                            return st
                        if not isinstance(obj, dict):
                            rec.done_mono = now
                            _fail(rec, "protocol", f"SSE data is not a JSON object: {data[:120]!r}")
                            return st
                        if event(st, obj):
                            tokens.append(now)
                            if first_tok is None:
                                first_tok = rec.first_token_mono = now
                                if total_timeout > first_token_timeout:
                                    tmo.reschedule(_loop_time_at(sent + total_timeout))
                for data in parser.close():
                    if data == b"[DONE]":
                        st.done = True
        rec.done_mono = _mono()
    except TimeoutError:
        rec.done_mono = _mono()
        if rec.first_token_mono is None:
            _fail(rec, "timeout-first-token", f"no token within {first_token_timeout:g} s")
        else:
            _fail(rec, "timeout-total", f"not finished within {total_timeout:g} s")
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
