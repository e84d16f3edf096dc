"""Control calls to a serving server: the one readiness poll, cache flush, /metrics fetch (httpx).

`wait_ready` is the only readiness loop: a launched server (`ServerProcess`, also gated on its
ready line and on the process still running), an attached one (`check_server`: one line when nothing
listens, waits while /health says 503) and the tests' servers all poll through it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from harness.client.dialects import normalize_base_url
from harness.engines import RESET_PATHS
from harness.errors import HarnessError

FLUSH_TRIES = 60
FLUSH_WAIT_S = 0.5
# SGLang's gateway (smg 1.13.0) answers a /flush_cache that some worker refused with HTTP 206, JSON
# {"status": "partial_success", "message": "Cache flush: 0 succeeded, 2 failed", ...}: SGLang's 400 while a
# request runs, such as the one-token generation its /health runs (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION,
# on by default) each time smg checks a worker. Retried as that 400 is (docs/smg-routing.md)
GATEWAY_PARTIAL = "partial_success"
READY_WAIT_S = 300.0


def tls_verify(url: str) -> bool:
    """Verify certificates only where TLS can happen: building a verifying context loads the CA bundle,
    ~50 ms of CPU per client, and a plain http:// request never uses it."""
    return not url.startswith("http://")


class NotReady(Exception):
    """The server did not become ready: `why` is what the last probe saw; `unreachable` when it gave up at once."""

    def __init__(self, why: str, *, unreachable: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.unreachable = unreachable


def wait_ready(
    url: str,
    *,
    within_s: float,
    poll_s: float = 0.1,
    headers: dict[str, str] | None = None,
    request_timeout_s: float = 2.0,
    trust_env: bool = False,
    ready: Callable[[int], bool] = lambda status: status == 200,
    fail_when_unreachable: bool = False,
    gate: Callable[[], str | None] | None = None,
) -> None:
    """GET url every poll_s until ready(status); raise NotReady with the last probe's outcome at the deadline.

    gate runs before each probe: it may raise (the process died) or return why not to probe yet (no
    ready line in the log yet). An unparsable URL, or with fail_when_unreachable a refused connection,
    raises NotReady(unreachable=True) at once.
    """
    deadline = time.monotonic() + within_s
    last = "no answer yet"
    timeout = httpx.Timeout(request_timeout_s)
    with httpx.Client(
        timeout=timeout, trust_env=trust_env, headers=headers, verify=tls_verify(url)
    ) as client:
        while True:
            not_yet = gate() if gate is not None else None
            if not_yet is None:
                try:
                    r = client.get(url)
                except httpx.InvalidURL as e:
                    raise NotReady(f"{type(e).__name__}: {e}", unreachable=True) from None
                except httpx.HTTPError as e:
                    if fail_when_unreachable:
                        raise NotReady(f"{type(e).__name__}: {e}", unreachable=True) from None
                    last = f"{url}: {type(e).__name__}"
                else:
                    if ready(r.status_code):
                        return
                    last = f"{url} answered {r.status_code}"
            else:
                last = not_yet
            if time.monotonic() >= deadline:
                raise NotReady(last)
            time.sleep(poll_s)


WAIT_READY_S = 5.0  # `harness run --wait-ready` default: how long a closed port is waited for


def check_server(
    base_url: str,
    timeout: float = 5.0,
    ready_wait_s: float = READY_WAIT_S,
    wait_ready_s: float = WAIT_READY_S,
) -> None:
    """Wait until the server answers, then while /health says 503 (loading); one line when it never does.

    A closed port is waited for `wait_ready_s` (some engines open their port only once ready;
    0 fails at once); then a 503 (SGLang loading its weights) up to `ready_wait_s`.
    """
    url = normalize_base_url(base_url)
    if not url.startswith(("http://", "https://")):
        raise HarnessError(f"--server-url: expected http://HOST:PORT, got {base_url!r}")
    try:
        wait_ready(
            url + "/health",
            within_s=wait_ready_s,
            poll_s=0.25,
            request_timeout_s=timeout,
            trust_env=True,
            ready=lambda status: True,  # any answer: something listens there
            fail_when_unreachable=wait_ready_s <= 0,
        )
    except NotReady as e:
        waited = f" (waited {wait_ready_s:g}s, --wait-ready)" if wait_ready_s > 0 else ""
        raise HarnessError(f"--server-url: cannot reach {base_url} ({e.why}){waited}") from None
    try:
        wait_ready(
            url + "/health",
            within_s=ready_wait_s,
            poll_s=0.25,
            request_timeout_s=timeout,
            trust_env=True,
            # 503 is SGLang's "not ready yet" (weights loading, warm-up): requests sent now would fail;
            # any other answer means something serves there
            ready=lambda status: status != 503,
            fail_when_unreachable=True,
        )
    except NotReady as e:
        if e.unreachable:
            raise HarnessError(f"--server-url: cannot reach {base_url} ({e.why})") from None
        raise HarnessError(
            f"--server-url: {base_url} not ready after {ready_wait_s:g}s (/health answers 503)"
        ) from None


def flush_cache(
    base_url: str,
    *,
    tries: int = FLUSH_TRIES,
    wait_s: float = FLUSH_WAIT_S,
    headers: dict[str, str] | None = None,
    paths: tuple[str, ...] = RESET_PATHS,
) -> tuple[bool | None, str | None]:
    """POST the first reset endpoint that exists until it succeeds; (None, note) when none exists.

    Refusals are retried: SGLang's 400 while requests are pending, a 200 `{"success": false}`
    while blocks are still held. Anything but a success leaves the point's cache warm (harness.verdicts.cold).
    """
    missing = []
    for path in paths:
        flushed, note = _reset_one(normalize_base_url(base_url) + path, tries, wait_s, headers)
        if flushed is not None:
            return flushed, note
        missing.append(f"{path} {note}")
    if not missing:
        return None, "no flush endpoint known for this server"
    return None, "no flush endpoint (" + "; ".join(missing) + ")"


def _reset_one(
    url: str, tries: int, wait_s: float, headers: dict[str, str] | None
) -> tuple[bool | None, str | None]:
    last = ""
    for i in range(tries):
        try:
            # the spec's headers too: a server started with --api-key refuses an unauthenticated flush
            r = httpx.post(url, timeout=30.0, headers=headers, verify=tls_verify(url))
        except httpx.HTTPError as e:
            return False, f"flush failed: {type(e).__name__}: {e}"
        if r.status_code in (404, 405):
            return None, f"HTTP {r.status_code}"
        refused_200 = r.status_code == 200 and _says_failure(r)
        if r.status_code == 200 and not refused_200:
            return True, None if i == 0 else f"flushed after {i + 1} tries"
        last = f"HTTP {r.status_code}: {r.text.strip()[:200]}"
        # SGLang answers 400 with a generic text (the "pending requests" reason is only in its log)
        text = r.text.lower()
        busy = (
            "pending" in text
            or r.status_code in (400, 503)
            or (r.status_code == 206 and GATEWAY_PARTIAL in text)
        )
        if not refused_200 and not busy:
            return False, f"flush refused: {last}"
        time.sleep(wait_s)
    return False, f"not flushed after {tries} tries ({last})"


def _says_failure(r: httpx.Response) -> bool:
    """A reset that answers 200 `{"success": false}` refused (blocks still held: the adapters in harness.engines)."""
    if "json" not in r.headers.get("content-type", ""):
        return False
    try:
        body = r.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("success") is False


def fetch_server_info(
    base_url: str, paths: tuple[str, ...], headers: dict[str, str] | None = None
) -> dict[str, Any] | None:
    """The first JSON object one of `paths` answers with (a server's settings), or None when none does."""
    verify = tls_verify(normalize_base_url(base_url))
    with httpx.Client(timeout=5.0, trust_env=False, headers=headers, verify=verify) as client:
        for path in paths:
            try:
                r = client.get(normalize_base_url(base_url) + path)
                info = r.json() if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                continue
            if isinstance(info, dict):
                return info
    return None


def fetch_metrics(base_url: str, dest: Path, headers: dict[str, str] | None = None) -> bool:
    """Save raw /metrics text when the server answers 200; say whether it did."""
    try:
        url = normalize_base_url(base_url) + "/metrics"
        r = httpx.get(url, timeout=10.0, headers=headers, verify=tls_verify(url))
    except httpx.HTTPError:
        return False
    if r.status_code != 200:
        return False
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(r.text, encoding="utf-8")
    os.replace(tmp, dest)
    return True
