"""Property tests (issue 8): any bytes fed to the SSE path or the log parser give records or counted errors.

tests/client/test_client.py already checks that well-formed events survive any chunking; here the input itself is
arbitrary: random bytes, random JSON shapes from a misbehaving server, and log lines built from the
fragments real SGLang lines are made of with random values in between.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.capture.records import RequestRecord
from harness.client import SSEParser, StreamState, get_dialect, stream_request
from harness.client.events import parse_json as _parse
from harness.commands.parse_log import log_summary
from harness.engines import logs
from harness.workloads.prompts import BuiltPrompt

APIS = ("openai-chat", "openai-completions", "sglang-generate")
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ SSE: bytes -> data payloads


@FUZZ
@given(st.binary(max_size=2000), st.lists(st.integers(1, 64), max_size=40))
@example(b"data: x\r\r\n\n:\n\ndata:\n\n" + b"\xff" * 10, [3])
def test_sse_parser_takes_any_bytes_in_any_chunks(blob: bytes, cuts: list[int]) -> None:
    p = SSEParser()
    out, pos = [], 0
    for c in cuts:
        got = p.feed(blob[pos : pos + c])
        assert all(isinstance(x, bytes) for x in got)
        out += got
        pos += c
    out += p.feed(blob[pos:])
    out += p.close()
    # chunking never changes what comes out
    q = SSEParser()
    assert q.feed(blob) + q.close() == out
    assert sum(len(x) for x in out) <= len(blob)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=12,
)
KEYS = st.sampled_from(
    ["choices", "delta", "content", "reasoning_content", "text", "finish_reason", "usage", "timings", "error"]
    + ["meta_info", "output_ids", "message", "prompt_tokens", "cached_tokens", "prompt_tokens_details"]
)
# objects shaped like the events the dialects read, with any value at any of their keys
EVENTS = st.recursive(
    JSONISH,
    lambda kids: st.dictionaries(KEYS, kids, max_size=4) | st.lists(kids, max_size=2),
    max_leaves=16,
)


@FUZZ
@given(st.sampled_from(APIS), st.lists(EVENTS, min_size=1, max_size=6))
@example("openai-chat", [{"choices": "x"}])
@example("openai-chat", [{"choices": [{"delta": {"content": 7}}]}])
@example("sglang-generate", [{"text": 5, "meta_info": [1]}])
def test_dialects_never_raise_on_odd_event_shapes(api: str, events: list) -> None:
    """What the client does with each event: a token or not, or a protocol error it can record."""
    d = get_dialect(api)
    s = StreamState()
    for obj in events:
        if not isinstance(obj, dict):
            continue  # the client records a non-object as a protocol error before any dialect sees it
        try:
            tok = d.event(s, obj)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError):
            # stream_request turns this into error_kind "protocol" (checked end to end below)
            break
        assert isinstance(tok, bool)
    assert isinstance(s.answer(), str)


@FUZZ
@given(st.binary(max_size=300))
@example(b"[" * 50_000)
@example(b'{"a":' * 20_000)
def test_json_of_an_event_is_an_object_or_a_value_error(data: bytes) -> None:
    try:
        obj = _parse(data)
    except ValueError:
        return
    json.dumps(obj)  # what parsed is plain JSON


# ------------------------------------------------------------------ end to end: a server sending junk


class JunkServer:
    """An aiohttp server on 127.0.0.1:0 that answers each request with the next queued raw body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        body = self.bodies.pop(0) if self.bodies else b""
        for i in range(0, len(body), 97):
            await resp.write(body[i : i + 97])
        await resp.write_eof()
        return resp


async def _send_all(bodies: list[bytes], api: str) -> list[RequestRecord]:
    junk = JunkServer()
    junk.bodies = list(bodies)
    app = web.Application()
    app.router.add_post("/{tail:.*}", junk.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001
    d = get_dialect(api)
    body = d.body(
        "m", BuiltPrompt(payload="hi" if api != "openai-chat" else [], expected_tokens=1, sha="x"), 4
    )
    recs = []
    try:
        async with aiohttp.ClientSession() as session:
            for _ in bodies:
                rec = RequestRecord(
                    experiment="e", server="s", point="p", seed=0, index=0, api=api, scheduled_mono=0.0
                )
                await stream_request(
                    session,
                    f"http://127.0.0.1:{port}{d.path}",
                    d,
                    body,
                    rec,
                    first_token_timeout=5,
                    total_timeout=5,
                )
                recs.append(rec)
    finally:
        await runner.cleanup()
    return recs


SSE_BODIES = st.one_of(
    st.binary(max_size=400),
    st.lists(EVENTS, min_size=1, max_size=4).map(
        lambda evs: b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in evs) + b"data: [DONE]\n\n"
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(APIS), st.lists(SSE_BODIES, min_size=1, max_size=5))
@example("openai-chat", [b"data: " + b"[" * 40_000 + b"\n\n", b'data: {"choices": "x"}\n\n'])
@example("sglang-generate", [b'data: {"text": 5}\n\ndata: [DONE]\n\n'])
def test_stream_request_records_every_answer_whatever_the_bytes(api: str, bodies: list[bytes]) -> None:
    recs = asyncio.run(_send_all(bodies, api))
    assert len(recs) == len(bodies)
    for rec in recs:
        assert rec.done_mono is not None
        if rec.ok:
            assert rec.error_kind is None and rec.first_token_mono is not None
        else:
            assert rec.error_kind in ("protocol", "disconnect", "http", "truncated") and rec.error
        json.dumps(rec.__dict__, default=str)  # the record can be written


# ------------------------------------------------------------------ the log parser


@FUZZ
@given(st.binary(max_size=3000))
def test_parse_file_takes_any_bytes(tmp_path_factory: pytest.TempPathFactory, blob: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("log")) / "server.log"
    path.write_bytes(blob)
    log = logs.parse_file(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    assert log.lines == len(lines)
    # every line that is not blank is a record or counted as unknown
    assert len(log.records) + log.unknown == sum(1 for ln in lines if ln.strip())
    summary = log_summary(log)
    json.dumps(summary, default=str)


PREFIXES = st.sampled_from(
    [
        "",
        "[2025-08-01 10:00:00] ",
        "[2025-08-01 10:00:00.123 TP0] ",
        "(sglang::scheduler) [2025-13-45 99:99:99 DP1 TP2] ",
    ]
    + ["[0000-00-00 00:00:00] ", "[9999-12-31 23:59:59,999999 PP0 EP12] "]
)
BODIES = st.sampled_from(
    [
        "Prefill batch. #new-seq: {a}, #new-token: {b}, #cached-token: {c}, token usage: {d}, #running-req: {a},",
        "Prefill batch [{a}], #new-seq: {a}, #new-token: {b}, #cached-token: {c}, cuda graph: {d}",
        "Decode batch. #running-req: {a}, #token: {b}, token usage: {d}, gen throughput (token/s): {c}, ",
        "KV Cache is allocated. #tokens: {a}, K size: {b} GB, V size: {c} GB",
        "{a} KV cache allocated: {b}",
        "Allocating {d} GB host memory for hierarchical KV cache",
        "Allocating {a} hierarchical KV host pool: {b} tokens, {d} GB",
        "max_total_num_tokens={a}, chunked_prefill_size={b}, max_running_requests={c}",
        "Cache not flushed because there are pending requests. #queue-req: {a}, #running-req: {b}",
        "HiCache prefetch {a} req={b} completed={c} matched={d}",
        "The server is fired up and ready to roll!",
        "Cache flushed successfully!",
    ]
)
VALUES = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True).map(str),
    st.text(max_size=12),
    st.sampled_from(["1" * 5000, "1.2.3", "..", "True", "None", "inf", "-", ":", ",", "1e999", "0x10"]),
)


@FUZZ
@given(PREFIXES, BODIES, VALUES, VALUES, VALUES, VALUES)
@example("[2025-08-01 10:00:00 TP" + "1" * 5000 + "] ", "Cache flushed successfully!", "", "", "", "")
@example("", "Prefill batch [{a}], #new-seq: {a}", "9" * 5000, "", "", "")
@example("", "Allocating {a} hierarchical KV host pool: {b} tokens, {d} GB", "x", "9" * 5000, "", "1.2.3")
@example("", "Prefill batch. #new-seq: {a}, #new-token: {b}, #cached-token: {c}", "1", "abc", "[]", "")
def test_log_lines_made_of_real_fragments_never_raise(pre, body, a, b, c, d) -> None:
    line = pre + body.format(a=a, b=b, c=c, d=d)
    log = logs.parse_lines([line, line + "\n", "garbage"])
    assert log.lines == 3 and len(log.records) + log.unknown == (3 if line.strip() else 1)
    summary = log_summary(log)
    json.dumps(summary, default=str)
    for rec in log.records:
        json.dumps(rec.to_dict(), default=str)
