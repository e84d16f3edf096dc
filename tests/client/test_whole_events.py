"""h1wire.whole_events (chunk framing and SSE split in one pass) against the state machine and the
SSE parser, on arbitrary reads: where it answers, it gives what they give; the engine's results agree."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.client.h1wire import H1Error, whole_events
from harness.client.http1 import H1Conn
from harness.client.sse import SSEParser

_BYTES = st.sampled_from(
    [b"data: ", b"\r", b"\n", b"\r\n"] + [b"{", b"x", b" ", b"0", b":", b"\x00", b"\xff", b"\xc3\xa9"] * 3
)
_TEXT = st.lists(_BYTES, max_size=8).map(b"".join)


def _reference(data: bytes) -> tuple[list[bytes], bool] | None:
    """The engine's other paths: the chunk state machine (or whole_chunks), then an idle SSE parser."""
    conn = H1Conn(asyncio.new_event_loop())
    try:
        body, finished = conn._dechunk(data)
    except H1Error:
        return None
    if conn.buf or conn.chunk_state not in (0, 3):
        return None  # a chunk left half read: not a read of whole chunks
    return SSEParser().feed(body), finished


@st.composite
def reads(draw) -> bytes:
    """Mostly well-formed chunked SSE (one event a chunk), with arbitrary damage here and there."""
    out = []
    for _ in range(draw(st.integers(0, 5))):
        payload = draw(_TEXT)
        data = draw(st.sampled_from([b"data: "] * 6 + [b"data:", b"", b"event: x\ndata: "])) + payload
        data += draw(st.sampled_from([b"\n\n"] * 6 + [b"\n", b"\r\n\r\n", b""]))
        size = len(data) + draw(st.sampled_from([0] * 8 + [1, -1]))
        line = draw(st.sampled_from([b"%x\r\n"] * 8 + [b"%X\r\n", b"%x\n", b"%x;e=1\r\n", b" %x\r\n"])) % max(
            size, 0
        )
        out.append(line + data + draw(st.sampled_from([b"\r\n"] * 8 + [b"\n", b""])))
    out.append(draw(st.sampled_from([b"", b"0\r\n\r\n", b"0\r\n", b"0\r\nX: 1\r\n\r\n", b"0\n\n"])))
    return b"".join(out)


@st.composite
def near_reads(draw) -> bytes:
    """Well-formed reads of whole events, then maybe one byte changed (a near miss)."""
    payloads = draw(st.lists(st.binary(max_size=30), max_size=5))
    wire = b"".join(b"%x\r\ndata: %s\n\n\r\n" % (len(p) + 8, p) for p in payloads)
    wire += draw(st.sampled_from([b"", b"0\r\n\r\n"]))
    if wire and draw(st.booleans()):
        i = draw(st.integers(0, len(wire) - 1))
        wire = wire[:i] + draw(st.sampled_from([b"\r", b"\n", b"0", b"a", b":", b" ", b""])) + wire[i + 1 :]
    return wire


@settings(max_examples=3000, deadline=None)
@given(st.one_of(reads(), near_reads(), st.binary(max_size=80)))
def test_whole_events_is_what_the_other_paths_give(data: bytes) -> None:
    got = whole_events(data)
    if got is not None:
        assert got == _reference(data)


def test_whole_events_takes_the_common_shape() -> None:
    evs = [b'{"a":"x"}', b"", b"[DONE]", b'{"t":"\xc3\xa9 :"}']
    wire = b"".join(b"%x\r\ndata: %s\n\n\r\n" % (len(e) + 8, e) for e in evs)
    assert whole_events(wire) == (evs, False)
    assert whole_events(wire + b"0\r\n\r\n") == (evs, True)
    assert whole_events(b"0\r\n\r\n") == ([], True)
    assert whole_events(wire.replace(b"data: [DONE]", b"data:[DONE] ")) is None  # `data:` without its space
    assert whole_events(wire[:-1]) is None
