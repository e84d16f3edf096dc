"""HTTP/1.1 response bytes read without state: the head (parsed once per distinct head), where it ends,
a read of whole chunks, and of whole chunks that are whole SSE events. Pure functions of bytes, apart
from harness.client.http1's connection state.
"""

from __future__ import annotations

import re
from operator import itemgetter


class H1Error(Exception):
    """The server answered something that is not HTTP/1.1 we can read."""

    kind = "protocol"


# heads parsed so far, by their bytes: a server sends the same head for every response (a Date header
# changes it once a second), so a head is parsed once, not per response
HEADS_KEPT, HEAD_KEPT_MAX = 256, 1024  # at most 256 KB kept
_HEADS: dict[bytes, tuple[int, int | None, bool, bool, str | None]] = {}
# the gateway's answer to "which worker served this": smg sets it on every routed response
ROUTED_WORKER_HEADER = b"x-smg-routed-worker-id"


def read_head(head: bytes) -> tuple[int, int | None, bool, bool, str | None]:
    """parse_head, kept by the head's bytes (256 heads of at most 1 KB: a server's heads repeat)."""
    parsed = _HEADS.get(head)
    if parsed is None:
        parsed = parse_head(head)
        if len(head) <= HEAD_KEPT_MAX:
            if len(_HEADS) >= HEADS_KEPT:
                _HEADS.clear()
            _HEADS[head] = parsed
    return parsed


def parse_head(head: bytes) -> tuple[int, int | None, bool, bool, str | None]:
    """(status, Content-Length or None, chunked, keep-alive, the gateway's routed worker or None) of a
    response head; H1Error when unreadable."""
    lines = head.split(b"\n")  # a CR before the LF is whitespace that strip() drops below
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise H1Error(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    length = None
    chunked = False
    routed = None
    keep = parts[0] == b"HTTP/1.1"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise H1Error(f"bad Content-Length: {value.strip()[:40]!r}") from None
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            v = value.strip().lower()
            if v == b"close":
                keep = False
            elif v == b"keep-alive":
                keep = True
        elif name == ROUTED_WORKER_HEADER:
            routed = value.strip().decode("latin-1") or None
    return int(parts[1]), length, chunked, keep, routed


_BLANK_LINE = re.compile(rb"\n\r?\n")


def head_end(buf: bytes) -> tuple[int, int]:
    """(end of the head, start of the body) in buf, or (-1, -1) while the blank line has not arrived.

    Lines end in CRLF, or in a bare LF, which RFC 9112 section 2.2 lets a recipient accept (some
    hand-written servers send it); the common all-CRLF head costs one find.
    """
    i = buf.find(b"\r\n\r\n")
    if i >= 0 and buf.count(b"\n", 0, i) == buf.count(b"\r\n", 0, i):
        return i, i + 4
    m = _BLANK_LINE.search(buf)
    if m is None:
        return -1, -1
    start = m.start()
    return (start - 1 if start and buf[start - 1 : start] == b"\r" else start), m.end()


def whole_chunks(data: bytes) -> tuple[bytes, bool] | None:
    """Fast path for reads that hold whole chunks with no CRLF inside their data (SSE events).

    Split on CRLF gives size, data, size, data, ... (then "0", "", "" at the end of the body); it
    holds only if every size equals the length of the data after it. None: use the state machine.
    """
    parts = data.split(b"\r\n")
    finished = parts[-3:] == [b"0", b"", b""]
    del parts[-3 if finished else -1 :]
    if len(parts) % 2:
        return None
    datas = parts[1::2]
    try:
        sizes = list(map(int, parts[0::2], _SIXTEENS[: len(datas)]))
    except ValueError:
        return None
    if sizes != list(map(len, datas)) or 0 in sizes:
        return None
    return b"".join(datas), finished


_SIXTEENS = (16,) * 4096


_PAYLOAD = itemgetter(slice(6, None))  # what follows `data: `
_HEAD6 = itemgetter(slice(0, 6))


def whole_events(data: bytes) -> tuple[list[bytes], bool] | None:
    """Fast path for reads of whole chunks that each hold one whole single-line SSE event, `data: X` and
    a blank line (what the engines send): the events' data and whether the last chunk has arrived.

    What whole_chunks then SSEParser.feed (from an idle parser) give, in one split on LF, a one-byte
    separator (memchr: several times cheaper than a split on CRLF here). Per chunk the split gives
    `SIZE\r`, `data: X`, `` and `\r`; with SIZE = len(`data: X`) + 2 the framing and the events are
    exactly these, and X holds no CR or LF. None: anything else (use the other paths).
    """
    parts = data.split(b"\n")
    if parts[-1]:
        return None
    n = len(parts) - 1
    finished = parts[n - 2 : n] == [b"0\r", b"\r"]
    if finished:
        n -= 2
    if n % 4:
        return None
    k = n // 4
    if parts[2:n:4].count(b"") != k or parts[3:n:4].count(b"\r") != k:
        return None
    sizes, lines = parts[0:n:4], parts[1:n:4]
    # every size line ends in CR (LF-free parts: each CRLF in the join closes one of them)
    if (b"\n".join(sizes) + b"\n").count(b"\r\n") != k:
        return None
    try:
        if list(map(int, sizes, _SIXTEENS[:k])) != [len(x) + 2 for x in lines]:
            return None
    except ValueError:
        return None
    if list(map(_HEAD6, lines)).count(b"data: ") != k:
        return None
    events = list(map(_PAYLOAD, lines))
    if b"\r" in b"".join(events):
        return None
    return events, finished
