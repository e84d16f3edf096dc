"""A lean keep-alive HTTP/1.1 client on asyncio protocols, for plain http:// servers.

aiohttp's request machinery alone costs ~400 µs of CPU per request here, more than the whole budget
of the client-ceiling target (docs/client-ceiling.md); this one parses the response head and the
body (Content-Length, chunked or until close) inside data_received and hands body bytes, stamped on
arrival, to a sink, so a request costs one future and no per-chunk task switch. https:// and anything
unusual stay on aiohttp (harness.client.stream picks).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol
from urllib.parse import urlsplit

from harness.client.h1wire import H1Error, head_end, read_head, whole_chunks, whole_events

_mono = time.monotonic
MAX_HEAD = 64 * 1024
WATCH_S = 0.02  # deadline granularity: timeouts fire at most this late

IDLE, HEAD, LENGTH, CHUNKED, UNTIL_EOF, DONE = range(6)


class H1Disconnect(H1Error):
    """The connection closed before the response was complete."""

    kind = "disconnect"

    def __init__(self, text: str, got_bytes: bool) -> None:
        super().__init__(text)
        self.got_bytes = got_bytes


class H1ConnectError(Exception):
    """No connection (refused, unreachable); `timed_out` when the connect timeout fired."""

    def __init__(self, text: str, timed_out: bool = False) -> None:
        super().__init__(text)
        self.timed_out = timed_out


class Sink(Protocol):
    def head(self, status: int, now: float, routed: str | None = None) -> None: ...

    def body(self, data: bytes, now: float) -> bool:
        """Take body bytes; False stops the response (the connection is then closed)."""
        ...

    def events(self, events: list[bytes], now: float) -> bool | None:
        """Take the data of whole SSE events (the body was exactly `data: X` + blank line each); None:
        this sink cannot now (nothing taken: hand it the body bytes instead), else as body()."""
        ...

    def end(self, now: float) -> None: ...


class H1Conn(asyncio.Protocol):
    """One connection; one request at a time. Its waiter resolves True when the response ended cleanly."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.state = IDLE
        self.buf = b""
        self.sink: Sink | None = None
        self.waiter: asyncio.Future[bool] | None = None
        self.keep = True
        self.closed = False
        self.got_bytes = False
        self.remaining = 0  # LENGTH: body bytes left; CHUNKED: bytes left in the current chunk
        self.chunk_state = 0  # CHUNKED: 0 size line, 1 data, 2 CRLF after data, 3 trailers
        self.deadline: float | None = None  # loop.time() by which the request must end (pool watchdog)

    # ---------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # typeshed's Protocol takes any BaseTransport; a stream connection is always given a Transport
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        w = self.waiter
        if w is None or w.done():
            return
        if self.state == UNTIL_EOF:
            self._complete(_mono())
            return
        why = f"{type(exc).__name__}: {exc}" if exc else "server closed the connection"
        w.set_exception(H1Disconnect(f"{why} before the response was complete", self.got_bytes))

    def data_received(self, data: bytes) -> None:
        now = _mono()
        state = self.state
        if state in (IDLE, DONE):
            self.keep = False  # bytes nobody asked for: do not reuse this connection
            return
        self.got_bytes = True
        if state == HEAD:
            rest = self._head(data, now)
            if rest is None:
                return
            data = rest
            state = self.state
            if state == DONE:
                self._complete(now)
                return
            if not data:
                return
        sink = self.sink
        assert sink is not None
        if state == LENGTH:
            n = self.remaining
            if len(data) >= n:
                if len(data) > n:
                    self.keep = False
                    data = data[:n]
                self.remaining = 0
                if data and not sink.body(data, now):
                    self._stop()
                    return
                self._complete(now)
                return
            self.remaining = n - len(data)
            if not sink.body(data, now):
                self._stop()
        elif state == CHUNKED:
            if self.chunk_state == 0 and not self.buf and data.endswith(b"\n"):
                got = whole_events(data)  # chunks of one SSE event each: framing and SSE in one split
                if got is not None:
                    took = sink.events(got[0], now)
                    if took is not None:
                        if not took:
                            self._stop()
                        elif got[1]:
                            self.chunk_state = 3
                            self._complete(now)
                        return
            try:
                body, finished = self._dechunk(data)
            except H1Error as e:
                self._fail(e)
                return
            if body and not sink.body(body, now):
                self._stop()
                return
            if finished:
                self._complete(now)
        elif not sink.body(data, now):  # UNTIL_EOF
            self._stop()

    def eof_received(self) -> bool | None:
        return None  # close our side too; connection_lost follows

    # ---------------------------------------------------------------- requests
    def start(self, request: bytes, sink: Sink, deadline: float | None = None) -> asyncio.Future[bool]:
        assert self.transport is not None
        self.deadline = deadline
        self.sink = sink
        self.state = HEAD
        self.buf = b""
        self.got_bytes = False
        self.waiter = w = self.loop.create_future()
        self.transport.write(request)
        return w

    def reschedule(self, when: float | None) -> None:
        """Move this request's deadline (loop.time()); the same call as asyncio.Timeout.reschedule."""
        self.deadline = when

    def expire(self) -> None:
        """The deadline passed: end the request with TimeoutError and drop the connection."""
        self.deadline = None
        self._fail(TimeoutError())

    def abort(self) -> None:
        self.keep = False
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    @property
    def reusable(self) -> bool:
        t = self.transport
        return self.keep and not self.closed and self.state == IDLE and t is not None and not t.is_closing()

    # ---------------------------------------------------------------- parsing
    def _head(self, data: bytes, now: float) -> bytes | None:
        """Parse the status line and headers; returns the body bytes that followed, or None (need more)."""
        buf = self.buf + data if self.buf else data
        while True:
            i, j = head_end(buf)
            if i < 0:
                if len(buf) > MAX_HEAD:
                    self._fail(H1Error(f"response head larger than {MAX_HEAD} bytes"))
                    return None
                self.buf = buf
                return None
            head, buf = buf[:i], buf[j:]
            try:
                status, length, chunked, keep, routed = read_head(head)
            except H1Error as e:
                self._fail(e)
                return None
            if not 100 <= status < 200:  # 100 Continue and friends: a final response follows
                break
        self.buf = b""
        self.keep = self.keep and keep
        assert self.sink is not None
        self.sink.head(status, now, routed)
        if chunked:
            self.state, self.chunk_state, self.remaining = CHUNKED, 0, 0
        elif status in (204, 304):
            self.state = DONE
        elif length is not None:
            self.state, self.remaining = LENGTH, length
            if length == 0:
                self.state = DONE
        else:
            self.state, self.keep = UNTIL_EOF, False
        return buf

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """Body bytes in data (chunk framing removed) and whether the last chunk has arrived."""
        if self.chunk_state == 0 and not self.buf and data.endswith(b"\r\n"):
            got = whole_chunks(data)
            if got is not None:
                if got[1]:
                    self.chunk_state = 3
                return got
        buf = self.buf + data if self.buf else data
        self.buf = b""
        out: list[bytes] = []
        pos, end = 0, len(buf)
        cs, rem = self.chunk_state, self.remaining
        find = buf.find
        while pos < end:
            if cs == 0:  # size line; a whole chunk in view (the usual case) is taken in one step
                j = find(b"\r\n", pos)
                if j < 0:
                    if end - pos > 1024:
                        raise H1Error("chunk size line too long")
                    break
                line = buf[pos:j]
                try:
                    rem = int(line, 16)
                except ValueError:
                    try:
                        rem = int(line.split(b";", 1)[0], 16)
                    except ValueError:
                        raise H1Error(f"bad chunk size line: {line[:40]!r}") from None
                if rem < 0:
                    raise H1Error(f"bad chunk size line: {line[:40]!r}")
                pos = j + 2
                if not rem:
                    cs = 3
                    continue
                stop = pos + rem
                if stop + 2 <= end:
                    if buf[stop : stop + 2] != b"\r\n":
                        raise H1Error("chunk data not followed by CRLF")
                    out.append(buf[pos:stop])
                    pos, rem = stop + 2, 0
                    continue
                cs = 1
            elif cs == 1:  # chunk data split across reads
                take = buf[pos : pos + rem]
                out.append(take)
                pos += len(take)
                rem -= len(take)
                if rem:
                    break
                cs = 2
            elif cs == 2:  # CRLF after the data
                if end - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise H1Error("chunk data not followed by CRLF")
                pos += 2
                cs = 0
            else:  # trailers after the last chunk: done at an empty line
                rest = buf[pos:]
                if rest.startswith(b"\r\n") or b"\r\n\r\n" in rest:
                    self.chunk_state, self.remaining = cs, 0
                    if len(rest) > 2 and not rest.endswith(b"\r\n\r\n"):
                        self.keep = False
                    return b"".join(out), True
                if len(rest) > MAX_HEAD:
                    raise H1Error("chunk trailers too long")
                break
        self.buf = buf[pos:] if pos < end else b""
        self.chunk_state, self.remaining = cs, rem
        return b"".join(out), False

    def _complete(self, now: float) -> None:
        self.state = IDLE
        self.deadline = None
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.end(now)
        w = self.waiter
        self.waiter = None
        if w is not None and not w.done():
            w.set_result(True)

    def _stop(self) -> None:
        """The sink refused more bytes (it recorded why): drop the connection, end the request."""
        self.sink = None
        self.abort()
        w = self.waiter
        self.waiter = None
        if w is not None and not w.done():
            w.set_result(False)

    def _fail(self, exc: Exception) -> None:
        self.sink = None
        self.abort()
        w = self.waiter
        self.waiter = None
        if w is not None and not w.done():
            w.set_exception(exc)


class H1Pool:
    """Keep-alive connections to one http:// origin; the caller's concurrency cap bounds how many open."""

    def __init__(
        self, base_url: str, headers: dict[str, str] | None = None, connect_timeout: float | None = 10.0
    ) -> None:
        u = urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"H1Pool speaks plain http:// only, not {base_url!r}")
        self.host = u.hostname
        self.port = u.port or 80
        self.connect_timeout = connect_timeout
        host_hdr = f"[{self.host}]" if ":" in self.host else self.host
        if u.port:
            host_hdr += f":{u.port}"
        hdrs = {"Host": host_hdr, "User-Agent": "harness", **(headers or {})}
        for k, v in hdrs.items():
            if any(c in str(k) + str(v) for c in "\r\n\0") or ":" in str(k):
                raise ValueError(f"header {k!r} cannot be sent as is")
        self._headers = "".join(
            f"{k}: {v}\r\n" for k, v in hdrs.items() if k.lower() not in ("content-length", "connection")
        )
        self._prefix: dict[str, bytes] = {}
        self._idle: list[H1Conn] = []
        self._all: set[H1Conn] = set()
        self._watchdog: asyncio.Task | None = None
        self.opened = 0

    def request_bytes(self, url: str, body: bytes, extra: dict[str, str] | None = None) -> bytes:
        """The whole POST (head + body) for url, whose origin must be this pool's; `extra` headers are
        this request's own (the sim's lockstep header)."""
        pre = self._prefix.get(url)
        if pre is None:
            u = urlsplit(url)
            target = (u.path or "/") + (f"?{u.query}" if u.query else "")
            pre = self._prefix[url] = f"POST {target} HTTP/1.1\r\n{self._headers}".encode("latin-1")
        if extra:  # per request: checked on the whole text (one CR and LF per line, no NUL, no ':' in a name)
            lines = "".join([f"{k}: {v}\r\n" for k, v in extra.items()])
            n = len(extra)
            if lines.count("\r") != n or lines.count("\n") != n or "\0" in lines or ":" in "".join(extra):
                for k, v in extra.items():
                    if any(c in str(k) + str(v) for c in "\r\n\0") or ":" in str(k):
                        raise ValueError(f"header {k!r} cannot be sent as is")
            pre += lines.encode("latin-1")
        return pre + b"Content-Length: %d\r\n\r\n" % len(body) + body

    async def acquire(self, fresh: bool = False) -> tuple[H1Conn, bool]:
        """An idle open connection (reused=True) or a new one; fresh: always a new one (a retry after a
        stale pooled connection must not meet another stale one)."""
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        idle = self._idle
        while idle and not fresh:
            c = idle.pop()
            if c.reusable:
                return c, True
            self._drop(c)
        return await self._connect(), False

    def release(self, conn: H1Conn) -> None:
        if conn.reusable:
            self._idle.append(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: H1Conn) -> None:
        self._all.discard(conn)
        if not conn.closed:
            conn.abort()

    async def _connect(self) -> H1Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(lambda: H1Conn(loop), self.host, self.port)
        except TimeoutError:
            raise H1ConnectError(
                f"connect to {self.host}:{self.port} timed out after {self.connect_timeout:g} s", True
            ) from None
        except OSError as e:
            raise H1ConnectError(f"cannot connect to {self.host}:{self.port}: {e}") from None
        self.opened += 1
        self._all.add(conn)
        return conn

    async def _watch(self) -> None:
        """Expire requests past their deadline, checked every WATCH_S: no timer per request."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(WATCH_S)
            now = loop.time()
            for c in [c for c in self._all if c.deadline is not None and c.deadline <= now]:
                c.expire()

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        for c in list(self._all):
            if c.transport is not None and not c.closed:
                c.transport.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports finish closing
