"""An independent scripted HTTP server on the standard library's http.server (not aiohttp, not ours).

Answers POSTs with exact bytes chosen by the first path segment, so client tests see what real stacks
send: `/ok/v1/chat/completions` a clean stream; `/abort/...` SGLang's abort after 3 tokens; `/stop/`,
`/short/`, `/nofinish/`, `/eof/` other endings; `/json/` a non-SSE 200; `/barelf/` a head with bare LF
line ends; `/reuse-close/` closes a kept-alive connection, unanswered, when a second request arrives on
it; `/interval/` 4 tokens per event with per-event usage (SGLang --stream-interval 4 with continuous
usage). Paths ending in /generate get SGLang's native shape; GET /health answers 200.
Run: python tests/helpers/stdlib_server.py -> PORT n.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_dumps = json.JSONEncoder(separators=(",", ":")).encode
ABORT_AFTER = 3
INTERVAL = 4


def _sse(obj: dict) -> bytes:
    return b"data: " + _dumps(obj).encode() + b"\n\n"


def _chat(text: str, finish: str | None, usage: dict | None = None) -> bytes:
    obj: dict = {
        "id": "s1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish, "matched_stop": None}],
    }
    if usage is not None:
        obj["usage"] = usage
    return _sse(obj)


def _usage(done: int) -> dict:
    return {"prompt_tokens": 5, "completion_tokens": done, "total_tokens": 5 + done}


def chat_stream(mode: str, n: int) -> bytes:
    """An OpenAI chat stream for n asked tokens, ended the way `mode` says."""
    role = _sse({"id": "s1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    out = [role]
    if mode == "interval":
        for done in range(INTERVAL, n + 1, INTERVAL):
            text = "".join(f" t{i}" for i in range(done - INTERVAL, done))
            out.append(_chat(text, "length" if done == n else None, _usage(done)))
        return b"".join(out) + b"data: [DONE]\n\n"
    made = {"abort": ABORT_AFTER, "short": n - 2}.get(mode, n)
    finish = {"abort": "abort", "stop": "stop", "nofinish": None, "eof": None}.get(mode, "length")
    for i in range(made):
        out.append(_chat(f" t{i}", finish if i == made - 1 and mode != "abort" else None))
    if mode == "abort":
        out.append(_chat("", "abort"))
    if mode != "eof":
        out.append(_sse({"id": "s1", "choices": [], "usage": _usage(made)}))
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def generate_stream(mode: str, n: int) -> bytes:
    """SGLang /generate: cumulative text, meta_info with a cumulative completion_tokens on every event."""
    out, text = [], ""
    step = INTERVAL if mode == "interval" else 1
    made = {"abort": ABORT_AFTER, "short": n - 2}.get(mode, n)
    for done in range(step, made + 1, step):
        text += "".join(f" t{i}" for i in range(done - step, done))
        fin = None
        if done == made:
            fin = {"abort": {"type": "abort", "message": "Abort"}, "stop": {"type": "stop"}}.get(
                mode, {"type": "length", "length": done}
            )
            if mode in ("nofinish", "eof"):
                fin = None
        meta = {
            "id": "g1",
            "prompt_tokens": 5,
            "completion_tokens": done,
            "cached_tokens": 0,
            "finish_reason": fin,
        }
        out.append(_sse({"text": text, "meta_info": meta}))
    if mode != "eof":
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    served = 0  # requests answered on this connection (one handler object per connection)

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n", b"ok")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        req = json.loads(body or b"{}")
        mode = self.path.split("/")[1]
        self.served += 1
        if mode == "reuse-close" and self.served > 1:
            self.close_connection = True  # as a keep-alive timeout racing the request: no answer at all
            return
        if mode == "json":
            self._send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", _dumps({"id": "x"}).encode())
            return
        if self.path.endswith("/generate"):
            n = int((req.get("sampling_params") or {}).get("max_new_tokens") or 16)
            data = generate_stream(mode, n)
        else:
            n = int(req.get("max_tokens") or 16)
            data = chat_stream(mode, n)
        if mode == "eof":  # close-delimited body, as an HTTP/1.0 server sends it
            self.close_connection = True
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + data)
            return
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        if mode == "barelf":
            head = head.replace(b"\r\n", b"\n")
        self._send(head, data)

    def _send(self, head: bytes, data: bytes) -> None:
        eol = b"\n" if not head.endswith(b"\r\n") else b"\r\n"
        self.wfile.write(head + b"Content-Length: %d" % len(data) + eol + eol + data)
        self.wfile.flush()


def main() -> None:
    ThreadingHTTPServer.request_queue_size = 256  # 64 retries connecting at once must not meet a full backlog
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
