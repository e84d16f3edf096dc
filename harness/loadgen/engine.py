"""Which HTTP engine a run speaks: the lean HTTP/1.1 client for plain http://, aiohttp for the rest."""

from __future__ import annotations

import os

from harness.client.http1 import H1Pool
from harness.errors import HarnessError


def pick_engine(engine: str, url: str, headers: dict[str, str]) -> str:
    """http1 for plain http:// unless asked otherwise (or a header it cannot send); aiohttp for the rest."""
    engine = os.environ.get("HARNESS_HTTP_ENGINE", engine) if engine == "auto" else engine
    if engine not in ("auto", "http1", "aiohttp"):
        raise HarnessError(
            f"HTTP engine: unknown value {engine!r} (expected auto, http1 or aiohttp; env HARNESS_HTTP_ENGINE)"
        )
    if engine == "aiohttp" or not url.startswith("http://"):
        return "aiohttp"
    try:
        H1Pool(url, headers)
    except ValueError:
        return "aiohttp"
    return "http1"
