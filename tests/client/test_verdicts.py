"""Verdicts and wire leniency against an independent standard-library server (tests/helpers/stdlib_server.py).

Every request asks for max_tokens with ignore_eos, so only a "length" finish with all tokens is ok:
SGLang's abort, other finishes, short counts and streams without a finish are `truncated`; a clean
non-SSE 200 is `protocol`. Also: bare-LF response heads, a kept-alive connection closed on reuse
(retried once on both engines), per-event token counts, and an SSE parser linear in event size.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from harness.capture.records import RequestRecord
from harness.client import SSEParser, get_dialect, stream_request
from harness.client.http1 import H1Pool
from harness.workloads.prompts import BuiltPrompt
from tests.helpers.procs import STDLIB_SERVER, ScriptServer

pytestmark = pytest.mark.slow
ENGINES = ["http1", "aiohttp"]
ASKED = 16


@pytest.fixture(scope="module")
def stdlib_url():
    server = ScriptServer(STDLIB_SERVER)
    yield server.url
    server.stop()


def _session(engine: str, base: str, traced: bool = True):
    if engine == "http1":
        return H1Pool(base, {"Content-Type": "application/json"}, connect_timeout=5)
    if traced:
        from harness.client.aio import new_session

        return new_session(8)
    return aiohttp.ClientSession()


async def _close(session) -> None:
    await session.close()


async def _send(base: str, mode: str, api: str = "openai-chat", engine: str = "http1", n: int = 1, **kw):
    """n requests one after another on one session; the records and stream states."""
    d = get_dialect(api)
    payload = [{"role": "user", "content": "hi"}] if api == "openai-chat" else "hi"
    session = _session(engine, base, kw.pop("traced", True))
    out = []
    try:
        for i in range(n):
            rec = RequestRecord(
                experiment="e", server="s", point="p", seed=0, index=i, api=api, max_tokens=ASKED
            )
            rec.scheduled_mono = time.monotonic()
            body = d.body("m", BuiltPrompt(payload, None, "h"), ASKED)
            st = await stream_request(
                session,
                f"{base}/{mode}{d.path}",
                d,
                body,
                rec,
                headers={"Content-Type": "application/json"},
                first_token_timeout=kw.get("first_token_timeout", 5.0),
                total_timeout=10.0,
            )
            out.append((rec, st))
            await asyncio.sleep(0.02)  # the server's handler is back waiting on the kept-alive connection
    finally:
        await _close(session)
    return out


def _run(*a, **kw):
    return asyncio.run(_send(*a, **kw))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("api", ["openai-chat", "sglang-generate"])
def test_clean_stream_is_ok(stdlib_url, engine, api):
    [(rec, _)] = _run(stdlib_url, "ok", api, engine)
    assert rec.ok, rec.error
    assert rec.completion_tokens == ASKED and rec.finish_reason == "length" and len(rec.token_mono) == ASKED


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("api", ["openai-chat", "sglang-generate"])
def test_sglang_abort_after_3_of_16_tokens_is_truncated(stdlib_url, engine, api):
    [(rec, _)] = _run(stdlib_url, "abort", api, engine)
    assert not rec.ok and rec.error_kind == "truncated", (rec.error_kind, rec.error)
    assert rec.finish_reason == "abort" and rec.completion_tokens == 3 and len(rec.token_mono) == 3
    assert "abort" in rec.error and "16" in rec.error


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("mode", "api", "kind", "says"),
    [
        ("stop", "openai-chat", "truncated", "'stop'"),
        ("stop", "sglang-generate", "truncated", "'stop'"),
        ("short", "openai-chat", "truncated", "14 of 16"),
        ("short", "sglang-generate", "truncated", "14 of 16"),
        ("nofinish", "openai-chat", "truncated", "without a finish_reason"),
        ("eof", "openai-chat", "truncated", "without a finish_reason"),
        ("eof", "sglang-generate", "truncated", "without a finish_reason"),
        ("json", "openai-chat", "protocol", "without SSE events"),
    ],
)
def test_incomplete_answers_are_never_ok(stdlib_url, engine, mode, api, kind, says):
    [(rec, _)] = _run(stdlib_url, mode, api, engine)
    assert not rec.ok and rec.error_kind == kind, (rec.error_kind, rec.error)
    assert says in rec.error and "\n" not in rec.error


@pytest.mark.parametrize("engine", ENGINES)
def test_bare_lf_response_head_is_accepted(stdlib_url, engine):
    """RFC 9112 section 2.2: a recipient may take a bare LF as a line end; waiting for CRLF would
    run into the first-token timeout instead."""
    [(rec, _)] = _run(stdlib_url, "barelf", engine=engine, first_token_timeout=2.0)
    assert rec.ok, (rec.error_kind, rec.error)
    assert rec.ttft_sent_s < 1.0


@pytest.mark.parametrize("engine", ENGINES)
def test_connection_closed_on_reuse_is_retried_once(stdlib_url, engine):
    """The server closes a kept-alive connection, unanswered, when the next request arrives on it."""
    got = _run(stdlib_url, "reuse-close", engine=engine, n=3)
    assert [r.ok for r, _ in got] == [True] * 3, [r.error for r, _ in got]


def test_unretried_close_before_any_byte_is_not_called_mid_stream(stdlib_url):
    """A session without the reuse hook cannot know the connection was reused: no retry, but the
    label says what happened (no response byte), not 'lost mid-stream'."""
    got = _run(stdlib_url, "reuse-close", engine="aiohttp", n=2, traced=False)
    rec = got[1][0]
    assert got[0][0].ok and not rec.ok and rec.error_kind == "disconnect"
    assert "before any response byte" in rec.error and "mid-stream" not in rec.error


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("api", ["openai-chat", "sglang-generate"])
def test_tokens_per_event_where_the_server_says(stdlib_url, engine, api):
    """--stream-interval 4: one event carries 4 tokens; per-event usage says so."""
    [(rec, st)] = _run(stdlib_url, "interval", api, engine)
    assert rec.ok, rec.error
    assert len(rec.token_mono) == ASKED // 4 and st.event_tokens == [4] * (ASKED // 4)
    [(rec1, st1)] = _run(stdlib_url, "ok", "openai-chat", engine)  # usage only at the end: not per event
    assert rec1.ok and st1.event_tokens is None


def test_sse_parser_is_linear_in_event_size():
    """A 32 MB event in 4 KB reads: each read must not rescan what came before (that was 5.7 s of CPU
    for 4 MB, ~300 s for 32 MB); linear is well under a second. A guard against a hang, not a target."""
    size, step = 32 << 20, 4096
    event = b"data: " + b"x" * size + b"\n\n"
    p, got = SSEParser(), []
    t0 = time.process_time()
    for i in range(0, len(event), step):
        got += p.feed(event[i : i + step])
    cpu = time.process_time() - t0
    assert len(got) == 1 and len(got[0]) == size
    assert cpu < 10.0, f"{cpu:.1f} s of CPU for one {size >> 20} MB event"


async def _stale_rounds(base: str, engine: str, rounds: int, width: int) -> list[RequestRecord]:
    """`rounds` x (width requests at once, then width one after another) on one pool of width+8."""
    d = get_dialect("openai-chat")
    if engine == "http1":
        session = H1Pool(base, {"Content-Type": "application/json"}, connect_timeout=5)
    else:
        from harness.client.aio import new_session

        session = new_session(width + 8)
    body = d.body("m", BuiltPrompt([{"role": "user", "content": "hi"}], None, "h"), ASKED)

    async def one(i: int) -> RequestRecord:
        rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=i, api=d.name)
        await stream_request(
            session,
            f"{base}/reuse-close{d.path}",
            d,
            body,
            rec,
            headers={"Content-Type": "application/json"},
            first_token_timeout=5.0,
            total_timeout=10.0,
        )
        return rec

    out: list[RequestRecord] = []
    try:
        for r in range(rounds):
            out += await asyncio.gather(*(one(r * 2 * width + i) for i in range(width)))
            await asyncio.sleep(0.05)  # every handler back waiting on its kept-alive connection
            for i in range(width):  # each meets a stale pooled connection while others wait idle in the pool
                out.append(await one(r * 2 * width + width + i))
    finally:
        await session.close()
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_a_retry_goes_out_on_a_new_connection_never_another_stale_one(stdlib_url, engine):
    """Every kept-alive connection is closed unanswered when reused (as a server that closes idle
    keep-alive connections at once, uvicorn --timeout-keep-alive 0): the one retry must not take another
    pooled connection, which would be just as stale. Three rounds of 64 at once and 64 in a row: none lost."""
    recs = asyncio.run(_stale_rounds(stdlib_url, engine, rounds=3, width=64))
    lost = [(r.index, r.error_kind, r.error) for r in recs if not r.ok]
    assert len(recs) == 3 * 2 * 64 and not lost, lost[:3]
