"""The aiohttp engine's session (https://, or when asked) and its one retry on a stale pooled connection.

aiohttp retries a request on a keep-alive connection the server closed as it was reused only for
idempotent methods, and a POST is not one; a trace hook tells us whether the connection was reused, so
the request is retried once exactly when the server cannot have answered it (as harness.client.http1 does).
The retry goes out on a connection opened for it alone: the pool's other idle connections may be just
as stale (a server that closes idle keep-alive connections at once closes them all).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace

import aiohttp


async def _on_reuse(_session, ctx: SimpleNamespace, _params) -> None:
    req = ctx.trace_request_ctx
    if isinstance(req, _Attempt):
        req.reused = True


_TRACE = aiohttp.TraceConfig()
_TRACE.on_connection_reuseconn.append(_on_reuse)
_TRACE.freeze()


class _Attempt:
    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


def connect_timeout(connect_s: float) -> aiohttp.ClientTimeout:
    """A request's timeout on this engine: only the connect is bounded here (the stream's deadlines are
    harness.client.stream's)."""
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=None)


def new_session(limit: int, timeout: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientSession:
    """A session whose pool holds `limit` connections (aiohttp's default of 100 would cap concurrency)."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[_TRACE])


@asynccontextmanager
async def post(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str] | None,
    timeout: aiohttp.ClientTimeout | None,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The response to a POST, released on exit; retried once, on a new connection, when a reused
    connection closed before any response byte.

    Sessions not made by new_session carry no trace hook: reuse is then unknown and nothing is retried.
    """
    attempt = _Attempt()
    try:
        resp = await session.post(url, data=body, headers=headers, timeout=timeout, trace_request_ctx=attempt)
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        if not attempt.reused:
            raise
    else:
        async with resp:
            yield resp
        return
    # a one-connection session that never pools: the retry cannot meet another stale connection
    fresh = aiohttp.TCPConnector(limit=1, force_close=True)
    async with (
        aiohttp.ClientSession(connector=fresh, timeout=session.timeout) as one,
        await one.post(url, data=body, headers=headers, timeout=timeout) as resp,
    ):
        yield resp
