"""A server whose TTFT grows with the requests in flight by a known amount, for the capacity search's tests.

TTFT = base + per_request x the most requests in flight (this one included) seen during the request's
first `base` seconds: a closed-loop wave of c requests that arrive together all see c, so a probe at
concurrency c has TTFT base + per_request x c and the largest c under a TTFT bound is exact. Speaks
SGLang's /generate and OpenAI chat streaming as tests/helpers/stdlib_server.py does (its bytes), answers
/health, /metrics (no series), /flush_cache (SGLang's reset) and counts what it served at GET /stats.
With --fail-above N it refuses (503) every request that saw more than N in flight: an overload failure.
Run: python tests/helpers/loaded_server.py --base-ms 100 --per-request-ms 40 -> PORT n.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.helpers.stdlib_server import chat_stream, generate_stream


class Load:
    """Requests in flight, and the peak each live request has seen since it arrived."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inflight = 0
        self.watchers: dict[int, int] = {}  # request id -> peak in flight seen
        self.served = 0
        self.peaks: list[int] = []

    def arrive(self, rid: int) -> None:
        with self.lock:
            self.inflight += 1
            self.watchers[rid] = 0
            for k in self.watchers:
                self.watchers[k] = max(self.watchers[k], self.inflight)

    def peak(self, rid: int) -> int:
        with self.lock:
            return self.watchers[rid]

    def leave(self, rid: int) -> None:
        with self.lock:
            self.inflight -= 1
            self.peaks.append(self.watchers.pop(rid))
            self.served += 1


LOAD = Load()
BASE_S = 0.1
PER_REQUEST_S = 0.04
FAIL_ABOVE: int | None = None  # a request that saw more in flight than this is refused (503)
_ids = iter(range(1, 1 << 62))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between a kept-alive answer's writes

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/stats":
            body = json.dumps({"served": LOAD.served, "peaks": LOAD.peaks}).encode()
            self._send(b"application/json", body)
        else:  # /health: ok; /metrics: an empty exposition (no series)
            self._send(b"text/plain", b"" if self.path == "/metrics" else b"ok")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/flush_cache":
            self._send(b"text/plain", b"ok")
            return
        req = json.loads(body or b"{}")
        rid = next(_ids)
        LOAD.arrive(rid)
        try:
            time.sleep(BASE_S)
            peak = LOAD.peak(rid)
            refused = FAIL_ABOVE is not None and peak > FAIL_ABOVE
            if not refused:
                time.sleep(PER_REQUEST_S * peak)
        finally:  # out of flight before the answer leaves: the client's next request cannot overlap it
            LOAD.leave(rid)
        if refused:
            self._send(b"text/plain", b"overloaded", b"503 Service Unavailable")
        elif self.path.endswith("/generate"):
            n = int((req.get("sampling_params") or {}).get("max_new_tokens") or 4)
            self._send(b"text/event-stream", generate_stream("ok", n))
        else:
            self._send(b"text/event-stream", chat_stream("ok", int(req.get("max_tokens") or 4)))

    def _send(self, ctype: bytes, body: bytes, status: bytes = b"200 OK") -> None:
        head = b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype
        head += b"\r\nContent-Length: %d\r\n\r\n" % len(body)
        self.wfile.write(head + body)  # one write


def main() -> None:
    global BASE_S, PER_REQUEST_S, FAIL_ABOVE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-ms", type=float, default=100.0)
    ap.add_argument("--per-request-ms", type=float, default=40.0)
    ap.add_argument(
        "--fail-above", type=int, default=None, help="refuse (503) a request that saw more in flight"
    )
    args = ap.parse_args()
    BASE_S, PER_REQUEST_S = args.base_ms / 1000.0, args.per_request_ms / 1000.0
    FAIL_ABOVE = args.fail_above
    ThreadingHTTPServer.request_queue_size = 256  # a wave's connections at once: no SYN retried after 1 s
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
