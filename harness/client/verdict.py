"""What a finished (or failed) exchange means: usage copied, ok or an error kind, derived figures.

Every request asks for exactly `max_tokens` with `ignore_eos`, so an answer is complete only when the
server says it stopped for length and, where it reports usage, produced that many tokens; anything
shorter is `truncated` (an SGLang abort, a stream that just ends), never ok.
"""

from __future__ import annotations

import sys

from harness.capture.records import RequestRecord
from harness.client.dialects import StreamState
from harness.client.events import ERROR_TEXT_MAX
from harness.client.http1 import H1ConnectError, H1Disconnect, H1Error


def fail(rec: RequestRecord, kind: str, text: str) -> None:
    rec.ok = False
    rec.error_kind = kind
    rec.error = text


def take_usage(rec: RequestRecord, st: StreamState) -> None:
    """Copy the server's usage, cached-token split and timings into the record."""
    u = st.usage
    if isinstance(u, dict):  # anything else is not usage the server meant: no counts rather than junk
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
            rec.cached_storage = split.get("storage")
        if isinstance(u.get("num_retractions"), int):  # SGLang meta_info (/generate)
            rec.num_retractions = u["num_retractions"]
    if isinstance(st.sim_time, dict):
        rec.sim_time = st.sim_time
    if isinstance(st.timings, dict) and st.timings:
        rec.server_timings = st.timings
        if rec.cached_tokens is None and isinstance(st.timings.get("cache_n"), int):
            rec.cached_tokens = st.timings["cache_n"]
    rec.finish_reason = st.finish


def judge(rec: RequestRecord, st: StreamState, first_bytes: bytes = b"") -> None:
    """The verdict on a 200 response whose body ended cleanly (usage already taken)."""
    events = len(rec.token_mono)
    got = rec.completion_tokens
    asked = rec.max_tokens
    if st.error:
        fail(rec, "http", f"server error in stream: {str(st.error)[:ERROR_TEXT_MAX]}")
    elif st.finish is not None and st.finish != "length":
        fail(rec, "truncated", f"finish_reason {st.finish!r} after {_tokens(got, events)}{_of(asked)}")
    elif rec.first_token_mono is None:
        if st.finish is None and not st.done and st.usage is None:
            fail(rec, "protocol", f"200 response without SSE events (body starts {first_bytes[:80]!r})")
        else:
            fail(rec, "protocol", "stream finished without any generated text")
    elif st.finish is None:
        fail(
            rec, "truncated", f"stream ended without a finish_reason after {_tokens(got, events)}{_of(asked)}"
        )
    elif asked and isinstance(got, int) and got < asked:
        fail(rec, "truncated", f"finish_reason 'length' after {got} of {asked} completion tokens")
    else:
        rec.ok = True


def _tokens(got: int | None, events: int) -> str:
    return f"{got} completion tokens" if isinstance(got, int) else f"{events} text events"


def _of(asked: int | None) -> str:
    return f" (asked for {asked})" if asked else ""


def classify(exc: BaseException, rec: RequestRecord, first_token_timeout: float, total_timeout: float):
    """(error_kind, text) for an exception that ended an exchange early."""
    # aiohttp is imported only by a run on its engine (its import costs ~0.3 s of CPU): its errors exist
    # only then; >= 3.10 tells a connect timeout apart from other timeouts
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None and isinstance(exc, getattr(aiohttp, "ConnectionTimeoutError", ())):
        return "timeout-connect", f"connect timed out: {exc}"
    if isinstance(exc, TimeoutError):
        if rec.first_token_mono is None:
            return "timeout-first-token", f"no token within {first_token_timeout:g} s"
        return "timeout-total", f"not finished within {total_timeout:g} s"
    if isinstance(exc, H1ConnectError):
        if exc.timed_out:
            return "timeout-connect", f"connect timed out: {exc}"
        return "connect", f"cannot connect: {exc}"
    if isinstance(exc, H1Disconnect):
        return "disconnect", _lost(exc.got_bytes, str(exc))
    if isinstance(exc, H1Error):
        return "protocol", f"bad HTTP response: {exc}"
    if aiohttp is None:
        return "protocol", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect", f"cannot connect: {exc}"
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        # the head is the first thing aiohttp hands over: no status yet means no response byte seen
        return "disconnect", _lost(rec.http_status is not None, f"{type(exc).__name__}: {exc}")
    return "protocol", f"{type(exc).__name__}: {exc}"


def _lost(got_bytes: bool, why: str) -> str:
    if got_bytes:
        return f"connection lost mid-stream: {why}"
    return f"connection closed before any response byte (the server may not have seen the request): {why}"


def derive(rec: RequestRecord) -> None:
    """Convenience figures, re-derivable from the stamps and usage."""
    if rec.first_token_mono is not None:
        rec.ttft_s = rec.first_token_mono - rec.scheduled_mono
        rec.ttft_sent_s = rec.first_token_mono - (rec.sent_mono or rec.scheduled_mono)
    if rec.done_mono is not None:
        rec.e2e_s = rec.done_mono - rec.scheduled_mono
    if rec.sent_mono is not None:
        rec.late_s = rec.sent_mono - rec.scheduled_mono
    n = rec.completion_tokens
    if rec.first_token_mono is not None and rec.done_mono is not None and isinstance(n, int) and n > 1:
        # the server's count, not events: one event may carry several tokens (--stream-interval)
        rec.tpot_s = (rec.done_mono - rec.first_token_mono) / (n - 1)
