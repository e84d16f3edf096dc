"""A tiny HTTP server for ServerProcess tests: behaviours chosen by flags, standard library only."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ready-after", type=float, default=0.0)
    p.add_argument("--never-ready", action="store_true", help="never print the ready line, /health 503")
    p.add_argument("--exit-at-start", type=int, default=None, help="exit with this code at once")
    p.add_argument(
        "--ignore-term", action="store_true", help="ignore SIGTERM and SIGINT (either stop signal)"
    )
    p.add_argument("--child", action="store_true", help="start a child process in the same group")
    p.add_argument("--api-key", default=None)
    a = p.parse_args()
    print(f"fake server args: {sys.argv[1:]}", flush=True)
    print(f"env SECRET_TOKEN={os.environ.get('SECRET_TOKEN', '')}", flush=True)
    if a.exit_at_start is not None:
        print("fatal: cannot load the model", flush=True)
        sys.exit(a.exit_at_start)
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:  # say which stop signal came, then exit as a server does on it

        def stopped(signum: int, _frame: object) -> None:
            print(f"stopped by {signal.Signals(signum).name}", flush=True)
            os._exit(0)

        signal.signal(signal.SIGTERM, stopped)
        signal.signal(signal.SIGINT, stopped)
    if a.child:
        c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child pid {c.pid}", flush=True)
    start = time.monotonic()

    class H(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def _json(self, code: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            ready = not a.never_ready and time.monotonic() - start >= a.ready_after
            if self.path == "/health":
                self._json(200 if ready else 503, {})
            elif self.path == "/get_server_info":
                self._json(200, {"port": a.port, "api_key": a.api_key, "pid": os.getpid()})
            else:
                self._json(404, {})

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
    if not a.never_ready:
        time.sleep(a.ready_after)
        print("The server is fired up and ready to roll!", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
