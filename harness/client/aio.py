"""The aiohttp engine's session (https://, or when asked) and its one retry on a stale pooled connection.

aiohttp retries a request on a keep-alive connection the server closed as it was reused only for
idempotent methods, and a POST is not one; a trace hook tells us whether the connection was reused, so
the request is retried once exactly when the server cannot have answered it (as harness.client.http1 does).
"""

from __future__ import annotations

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


def new_session(limit: int, timeout: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientSession:
    """A session whose pool holds `limit` connections (aiohttp's default of 100 would cap concurrency)."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[_TRACE])


async def post(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str] | None,
    timeout: aiohttp.ClientTimeout | None,
) -> aiohttp.ClientResponse:
    """session.post, retried once on a fresh attempt when a reused connection closed before any response byte.

    Sessions not made by new_session carry no trace hook: reuse is then unknown and nothing is retried.
    """
    attempt = _Attempt()
    try:
        return await session.post(url, data=body, headers=headers, timeout=timeout, trace_request_ctx=attempt)
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        if not attempt.reused:
            raise
    return await session.post(url, data=body, headers=headers, timeout=timeout, trace_request_ctx=_Attempt())
