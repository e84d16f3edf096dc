"""A standard-library OpenAI chat server with a prefix cache whose reset can be broken on purpose.

It answers /v1/chat/completions (streaming, usage with prompt_tokens_details.cached_tokens), /health,
/metrics, and a reset endpoint per `--reset`:
  real  POST /flush_cache empties the cache (the control)
  noop  POST /flush_cache answers 200 "Cache flushed successfully!" and keeps everything (a reset that
        does not take)
  none  no reset endpoint at all (404)
  vllm  no /flush_cache; POST /reset_prefix_cache answers 200 {"success": false} for the first
        `--refuse N` calls (vLLM while blocks are held), then {"success": true} and empties the cache
Tokens are whitespace-separated words of the rendered chat; a prompt finds cached the longest prefix it
shares with any earlier prompt, in whole blocks of `--block` words, as a paged cache does.
Run: python tests/helpers/stdlib_cache_server.py --port 0 --reset noop  -> prints "PORT <n>".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Cache:
    """Every prompt seen since the last real reset, as word tuples; matched by longest common prefix."""

    def __init__(self, block: int) -> None:
        self.block, self.prompts, self.lock = block, [], threading.Lock()
        self.queries = self.hits = 0

    def lookup_insert(self, words: list[str]) -> int:
        with self.lock:
            best = 0
            for p in self.prompts:
                n = 0
                for a, b in zip(words, p, strict=False):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            cached = min(best, len(words) - 1) // self.block * self.block
            self.prompts.append(tuple(words))
            self.queries += len(words)
            self.hits += cached
            return cached

    def clear(self) -> None:
        with self.lock:
            self.prompts.clear()


def make_handler(cache: Cache, reset: str, refuse: int = 0) -> type[BaseHTTPRequestHandler]:
    state = {"resets": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_a) -> None:  # quiet
            pass

        def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._send(200, b"ok")
            elif self.path == "/metrics":
                text = (
                    "# TYPE sglang:prompt_tokens_total counter\n"
                    f"sglang:prompt_tokens_total {cache.queries}\n"
                    "# TYPE sglang:cached_tokens_total counter\n"
                    f"sglang:cached_tokens_total {cache.hits}\n"
                )
                self._send(200, text.encode())
            else:
                self._send(404, b"not found")

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = urlsplit(self.path).path
            if path == "/reset_prefix_cache" and reset == "vllm":
                state["resets"] += 1
                ok = state["resets"] > refuse
                if ok:
                    cache.clear()
                self._send(200, json.dumps({"success": ok}).encode(), "application/json")
            elif path == "/flush_cache" and reset not in ("none", "vllm"):
                if reset == "real":
                    cache.clear()
                self._send(200, b"Cache flushed successfully!")
            elif path == "/v1/chat/completions":
                self._chat(json.loads(body or b"{}"))
            else:
                self._send(404, b"not found")

        def _chat(self, req: dict) -> None:
            text = "".join(f"<{m.get('role')}> {m.get('content')}\n" for m in req.get("messages") or [])
            words = text.split()
            cached = cache.lookup_insert(words)
            n = int(req.get("max_tokens") or 4)
            events = [
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": "w "}}],
                }
                for _ in range(n)
            ]
            events[-1]["choices"][0]["finish_reason"] = "length"
            usage = {
                "prompt_tokens": len(words),
                "completion_tokens": n,
                "total_tokens": len(words) + n,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            events.append({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage})
            out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
            self._send(200, out, "text/event-stream")

    return Handler


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--reset", choices=("real", "noop", "none", "vllm"), default="noop")
    ap.add_argument("--refuse", type=int, default=0, help="vllm mode: refuse this many resets first")
    ap.add_argument("--block", type=int, default=16)
    args = ap.parse_args(argv)
    server = ThreadingHTTPServer(
        (args.host, args.port), make_handler(Cache(args.block), args.reset, args.refuse)
    )
    print(f"PORT {server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
