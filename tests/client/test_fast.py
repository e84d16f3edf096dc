"""The client's fast paths: SSE splitting, same-shape text events, and the lean HTTP/1.1 engine.

Each fast path must give exactly what the slow path gives; these tests compare them on hostile input.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.capture.records import RequestRecord
from harness.client import SSEParser, StreamState, get_dialect, stream_request
from harness.client.events import EventSink
from harness.client.http1 import H1Conn, H1Error, H1Pool
from harness.client.verdict import judge, take_usage


def _reference_sse(stream: bytes) -> list[bytes]:
    """The SSE rules applied to a whole stream at once, line by line (what any chunking must give)."""
    out, data = [], []
    for line in stream.split(b"\n"):
        line = line[:-1] if line.endswith(b"\r") else line
        if not line:
            if data:
                out.append(b"\n".join(data))
                data = []
        elif line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
    if data:
        out.append(b"\n".join(data))
    return out


_payload = st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"") or b"x")


@st.composite
def sse_streams(draw) -> bytes:
    parts = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["data", "data", "multi", "comment", "blank", "field"]))
        eol = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
        if kind == "data":
            parts.append(b"data: " + draw(_payload) + eol + eol)
        elif kind == "multi":
            parts.append(b"data: " + draw(_payload) + eol + b"data:" + draw(_payload) + eol + eol)
        elif kind == "comment":
            parts.append(b": ping" + eol + eol)
        elif kind == "blank":
            parts.append(eol)
        else:
            parts.append(b"event: x" + eol + b"id: 3" + eol + b"data: " + draw(_payload) + eol + eol)
    return b"".join(parts)


@settings(max_examples=200, deadline=None)
@given(sse_streams(), st.lists(st.integers(1, 30), max_size=10))
def test_sse_fast_and_slow_paths_agree_on_any_stream_and_chunking(stream, cuts):
    p, got, pos = SSEParser(), [], 0
    for c in cuts:
        got += p.feed(stream[pos : pos + c])
        pos += c
    got += p.feed(stream[pos:])
    got += p.close()
    assert got == _reference_sse(stream)


class _NoTimeout:
    def reschedule(self, when: float | None) -> None:  # the total deadline is not under test here
        pass


def _apply(api: str, events: list[bytes], chunked: bool) -> tuple[RequestRecord, StreamState, EventSink]:
    rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=0, api=api)
    st_ = StreamState()
    ev = EventSink(rec, get_dialect(api), st_, _NoTimeout(), None)
    ev.head(200, 1.0)
    stream = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)] if chunked else [stream]
    for i, piece in enumerate(pieces):
        assert ev.body(piece, 1.0 + i)
    ev.end(99.0)
    take_usage(rec, st_)
    judge(rec, st_)
    return rec, st_, ev


def _chat_event(text: str, ensure_ascii: bool, fin: str | None = None) -> bytes:
    obj = {
        "id": "x1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": fin}],
    }
    return json.dumps(obj, ensure_ascii=ensure_ascii, separators=(",", ":")).encode()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=6), min_size=1, max_size=12), st.booleans(), st.booleans())
def test_text_fast_path_is_exact_for_any_text(texts, ensure_ascii, chunked):
    events = [_chat_event(t, ensure_ascii) for t in texts]
    events[-1] = _chat_event(texts[-1], ensure_ascii, fin="length")
    rec, st_, _ = _apply("openai-chat", events, chunked)
    assert st_.pieces == [t for t in texts if t]  # exactly what a JSON parse of each event gives
    assert len(rec.token_mono) == len(st_.pieces) and st_.finish == "length"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=4), min_size=1, max_size=12), st.booleans())
def test_a_run_of_same_shape_events_is_taken_as_each_one_alone_would_be(texts, ensure_ascii):
    """A known template meets a run of its events in one read (taken together, harness.client.events
    _take_run): any event of the run that needs the full parse (empty, escapes, control characters)
    sends the run one by one, so pieces and stamps are what a JSON parse of each event gives."""
    dialect = get_dialect("openai-chat")
    warm = [_chat_event(f" w{i}", False) for i in range(4)] + [_chat_event(" e", False, fin="length")]
    _stream_on(dialect, warm, 1.0)
    assert dialect.templates  # learnt: the next stream starts with it
    events = [_chat_event(t, ensure_ascii) for t in [" a", " b", *texts]]
    events.append(_chat_event(" end", ensure_ascii, fin="length"))
    rec, st_ = _stream_on(dialect, events, 5.0)
    want = [" a", " b", *(t for t in texts if t), " end"]
    assert st_.pieces == want and rec.token_mono == [5.0] * len(want)
    assert rec.first_token_mono == 5.0 and rec.ok


def _stream_on(dialect, events: list[bytes], now: float) -> tuple[RequestRecord, StreamState]:
    """One stream of events (then [DONE]) in a single read, on a given dialect."""
    rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=0, max_tokens=0)
    st_ = StreamState()
    ev = EventSink(rec, dialect, st_, _NoTimeout(), None)
    ev.head(200, now)
    assert ev.body(b"".join(b"data: " + e + b"\n\n" for e in [*events, b"[DONE]"]), now)
    ev.end(now)
    take_usage(rec, st_)
    judge(rec, st_)
    return rec, st_


def test_text_fast_path_engages_and_defers_to_full_parse_when_shape_changes():
    plain = [_chat_event(f" w{i}", False) for i in range(6)]
    odd = [
        b'{"id":"x1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a",'
        b'"reasoning_content":"why"},"finish_reason":null}]}',  # same prefix and suffix, quotes inside
        _chat_event('caf\u00e9 \\ "q" \n', True),  # escapes: full parse
        _chat_event(" end", False, fin="length"),  # finish_reason differs: full parse
    ]
    usage = b'{"id":"x1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}'
    rec, st_, ev = _apply("openai-chat", plain + odd + [usage], chunked=False)
    assert ev.tpl is not None  # learnt from the plain events
    assert st_.pieces == [f" w{i}" for i in range(6)] + ["a", 'caf\u00e9 \\ "q" \n', " end"]
    assert st_.reasoning == ["why"] and st_.finish == "length" and rec.completion_tokens == 9
    assert st_.answer().startswith("<think>why</think> w0") and rec.ok


def test_completions_fast_path_and_generate_never_uses_one():
    ev_c = [json.dumps({"id": "c", "choices": [{"index": 0, "text": f" t{i}"}]}).encode() for i in range(5)]
    _, st_c, ev = _apply("openai-completions", ev_c, chunked=True)
    assert st_c.pieces == [f" t{i}" for i in range(5)] and ev.tpl is not None
    cum = ["a", "a b", "a b c"]
    ev_g = [json.dumps({"text": t, "meta_info": {"id": "g"}}).encode() for t in cum]
    _, st_g, ev2 = _apply("sglang-generate", ev_g, chunked=False)
    assert st_g.pieces == ["a", " b", " c"] and ev2.tpl is None


def test_malformed_event_after_template_is_still_an_error():
    events = [_chat_event(f" w{i}", False) for i in range(4)] + [b'{"id":"x1","choices":[ {not json']
    rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=0)
    ev = EventSink(rec, get_dialect("openai-chat"), StreamState(), _NoTimeout(), None)
    ev.head(200, 1.0)
    ok = ev.body(b"".join(b"data: " + e + b"\n\n" for e in events), 1.0)
    assert not ok and rec.error_kind == "protocol"


# ---------------------------------------------------------------- HTTP/1.1 engine


@st.composite
def chunked_bodies(draw) -> tuple[bytes, bytes]:
    pieces = draw(st.lists(st.binary(min_size=1, max_size=40), max_size=8))
    wire = b""
    for p in pieces:
        ext = draw(st.sampled_from([b"", b";name=v"]))
        wire += b"%x%s\r\n%s\r\n" % (len(p), ext, p)
    wire += b"0\r\n" + draw(st.sampled_from([b"", b"X-Trailer: 1\r\n"])) + b"\r\n"
    return b"".join(pieces), wire


@settings(max_examples=200, deadline=None)
@given(chunked_bodies(), st.lists(st.integers(1, 50), max_size=8))
def test_dechunk_any_split(body_wire, cuts):
    body, wire = body_wire
    conn = H1Conn(asyncio.new_event_loop())
    conn.chunk_state = 0
    got, done, pos = [], False, 0
    for c in [*cuts, len(wire)]:
        part = wire[pos : pos + c]
        pos += c
        if part and not done:
            b, done = conn._dechunk(part)
            got.append(b)
    assert done and b"".join(got) == body


def test_dechunk_rejects_bad_size_line():
    conn = H1Conn(asyncio.new_event_loop())
    with pytest.raises(H1Error):
        conn._dechunk(b"zz\r\nabc\r\n")


_SSE = b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'


async def _raw_server(
    responses: list[bytes], close_after_each: bool = False
) -> tuple[asyncio.Server, list[int]]:
    """A real HTTP server on 127.0.0.1 that answers the k-th request with responses[k] (bytes as is)."""
    count = [0]
    conns: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(n)
                k = count[0]
                count[0] += 1
                writer.write(responses[min(k, len(responses) - 1)])
                await writer.drain()
                if close_after_each or b"HTTP/1.0" in responses[min(k, len(responses) - 1)][:9]:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, conns


async def _requests(
    responses: list[bytes], n: int, close_after_each: bool = False
) -> tuple[list, H1Pool, list]:
    server, conns = await _raw_server(responses, close_after_each)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    pool = H1Pool(url, {"Content-Type": "application/json"}, connect_timeout=5)
    d = get_dialect("openai-chat")
    recs = []
    try:
        for i in range(n):
            rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=i)
            await stream_request(pool, url + d.path, d, b"{}", rec, first_token_timeout=5, total_timeout=10)
            recs.append(rec)
            await asyncio.sleep(0.02)  # let a closing server side reach the client before the next one
    finally:
        await pool.close()
        server.close()
    return recs, pool, conns


def _chunked(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\n"
        + extra
        + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )


def test_h1_keep_alive_reuses_one_connection():
    recs, pool, conns = asyncio.run(_requests([_chunked(_SSE)], 3))
    assert all(r.ok and r.answer == "hi" and r.http_status == 200 for r in recs)
    assert pool.opened == 1 and len(conns) == 1


def test_h1_content_length_until_close_and_100_continue():
    length = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(_SSE), _SSE)
    cont = b"HTTP/1.1 100 Continue\r\n\r\n" + length
    until_close = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + _SSE
    recs, pool, _ = asyncio.run(_requests([length, cont, until_close, length], 4))
    assert [r.ok for r in recs] == [True] * 4, [r.error for r in recs]
    assert pool.opened == 2  # the HTTP/1.0 body ended with the connection, so the last one is new


def test_h1_server_closing_idle_connections_is_retried_once():
    recs, pool, conns = asyncio.run(_requests([_chunked(_SSE)], 3, close_after_each=True))
    assert all(r.ok for r in recs), [r.error for r in recs]
    assert pool.opened == 3 and len(conns) == 3


def test_h1_error_status_and_truncated_body():
    err = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\n\r\nbusy\nretry"
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + _SSE[:30]
    recs, _, _ = asyncio.run(_requests([err, cut], 2, close_after_each=True))
    assert (
        recs[0].error_kind == "http"
        and recs[0].http_status == 503
        and recs[0].error == "HTTP 503: busy\nretry"
    )
    assert recs[1].error_kind == "disconnect" and "\n" not in recs[1].error


def test_h1_not_http_is_a_protocol_error():
    recs, _, _ = asyncio.run(_requests([b"SSH-2.0-nope\r\n\r\n"], 1, close_after_each=True))
    assert recs[0].error_kind == "protocol"


def test_h1_pool_refuses_what_it_cannot_send():
    with pytest.raises(ValueError):
        H1Pool("https://example.com")
    with pytest.raises(ValueError):
        H1Pool("http://127.0.0.1:1", {"X-Bad": "a\r\nInjected: 1"})
    pool = H1Pool("http://127.0.0.1:8000/base", {"Authorization": "Bearer t"})
    req = pool.request_bytes("http://127.0.0.1:8000/base/v1/completions?x=1", b"{}")
    assert req.startswith(b"POST /base/v1/completions?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    assert b"Authorization: Bearer t\r\n" in req and req.endswith(b"Content-Length: 2\r\n\r\n{}")
    url = "http://127.0.0.1:8000/base/v1/completions"
    req = pool.request_bytes(url, b"{}", {"X-Harness-Lockstep": "seq=1;ready=0", "X-Two": "2"})
    assert req.endswith(b"X-Harness-Lockstep: seq=1;ready=0\r\nX-Two: 2\r\nContent-Length: 2\r\n\r\n{}")
    for bad in (
        {"X-Bad": "a\r\nInjected: 1"},
        {"X-Bad": "a\nb"},
        {"X-Bad": "a\rb"},
        {"X-Bad": "a\0"},
        {"X:Bad": "a"},
    ):
        with pytest.raises(ValueError, match="X.Bad"):
            pool.request_bytes(url, b"{}", {"X-Fine": "1", **bad})
