"""The client's receive path in-process, this tree beside another source tree, rounds interleaved.

One SGLang-shaped response (scripts/bench_client.py's `sglang` shape: head, 18 chunked SSE events in
one read) through H1Conn.data_received into an EventSink (framing, SSE, fast paths, stamps), then the
verdict (take_usage, judge, derive); and the same through stream_request on a fake transport (no
sockets: the asyncio future, the coroutines, the record's stamps). CPU µs per response (process time),
the median of each tree's rounds; the two trees run in turn in child processes, so machine load falls
on both alike. Not a test: compare the columns of one run.
Example: python scripts/bench_receive.py --base /tmp/c2_base --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import asyncio, json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/scripts"]
import bench_client
from harness.capture.records import RequestRecord
from harness.client.dialects import StreamState, get_dialect
from harness.client.events import EventSink
from harness.client.http1 import H1Conn, H1Pool
from harness.client.stream import stream_request
from harness.client.verdict import derive, judge, take_usage

N = int(sys.argv[2])
respond = bench_client._responder(bench_client.SHAPES["sglang"])
RESP = [b"".join(respond()) for _ in range(64)]
URL = "http://127.0.0.1:9/v1/chat/completions"


def rec(i):
    return RequestRecord(experiment="e", server="s", point="p", seed=0, index=i, max_tokens=16)


class Wire:
    # a transport whose peer answers every request at once, on the next loop turn
    def __init__(self, conn, loop):
        self.conn, self.loop, self.i = conn, loop, 0

    def write(self, data):
        self.i += 1
        self.loop.call_soon(self.conn.data_received, RESP[self.i % 64])

    def is_closing(self):
        return False


class Mute:
    # a transport for data_received called by hand
    def write(self, data):
        pass


class Pool(H1Pool):
    async def acquire(self, fresh=False):
        return self._idle.pop(), True

    def release(self, conn):
        self._idle.append(conn)


async def main():
    loop = asyncio.get_running_loop()
    d = get_dialect("openai-chat")
    conn = H1Conn(loop)
    conn.transport = Mute()
    t0 = time.process_time()
    for i in range(N):
        r, st = rec(i), StreamState()
        sink = EventSink(r, d, st, None, None)
        conn.start(b"", sink)
        conn.data_received(RESP[i % 64])
        take_usage(r, st)
        judge(r, st)
        derive(r)
        assert r.ok
    recv = (time.process_time() - t0) / N * 1e6
    pool = Pool("http://127.0.0.1:9")
    for _ in range(64):
        c = H1Conn(loop)
        c.transport = Wire(c, loop)
        pool._idle.append(c)

    async def worker(k):
        for i in range(k, N, 64):
            r = rec(i)
            await stream_request(pool, URL, d, b"{}", r)
            assert r.ok

    t0 = time.process_time()
    await asyncio.gather(*[worker(k) for k in range(64)])
    print(json.dumps({"receive": recv, "request": (time.process_time() - t0) / N * 1e6}))


asyncio.run(main())
"""


def one(tree: Path, n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tree), str(n)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="another source tree (e.g. git archive of main)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=5000, help="responses per round and path")
    a = ap.parse_args()
    trees = {"this tree": ROOT, f"source {a.base.name}": a.base.resolve()}
    got: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    for _ in range(a.rounds):
        for k, tree in trees.items():
            got[k].append(one(tree, a.requests))
    print(f"{a.requests:,} SGLang-shaped responses per round, {a.rounds} rounds interleaved, medians")
    print("| tree | receive path µs/response | stream_request µs/request |")
    print("|---|---|---|")
    for k, rows in got.items():
        recv = statistics.median(r["receive"] for r in rows)
        req = statistics.median(r["request"] for r in rows)
        print(f"| {k} | {recv:.1f} | {req:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
