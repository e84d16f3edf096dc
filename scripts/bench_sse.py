"""SSE parser cost for one large event read in small pieces, this tree's parser beside a git ref's.

Prints CPU seconds (process time) per event size and read size, side by side in one run, so a change to
harness/client/sse.py shows its effect on the same machine at the same moment. Not a test.
Example: python scripts/bench_sse.py --ref main --sizes-mb 1 4
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.client.sse import SSEParser  # noqa: E402


def parser_at(ref: str) -> type:
    """SSEParser as harness/client/sse.py was at a git ref (loaded from `git show`, not imported)."""
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:harness/client/sse.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    mod = types.ModuleType(f"sse_at_{ref}")
    exec(compile(src, f"{ref}:harness/client/sse.py", "exec"), mod.__dict__)
    return mod.SSEParser


def cpu_for(cls: type, size: int, read: int) -> float:
    event = b"data: " + b"x" * size + b"\n\n"
    p, got = cls(), []
    t0 = time.process_time()
    for i in range(0, len(event), read):
        got += p.feed(event[i : i + read])
    cpu = time.process_time() - t0
    if len(got) != 1 or len(got[0]) != size:
        raise SystemExit(f"{cls.__module__}: wrong parse of a {size}-byte event")
    return cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="main", help="git ref whose parser is measured beside this tree's")
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4])
    ap.add_argument("--reads", type=int, nargs="+", default=[4096, 65536], help="bytes per read")
    a = ap.parse_args()
    before = parser_at(a.ref)
    print(f"| event | read | {a.ref} CPU s | this tree CPU s | ratio |")
    print("|---|---|---|---|---|")
    for mb in a.sizes_mb:
        for read in a.reads:
            size = int(mb * (1 << 20))
            b, n = cpu_for(before, size, read), cpu_for(SSEParser, size, read)
            print(f"| {mb:g} MB | {read:,} B | {b:.3f} | {n:.4f} | {b / max(n, 1e-6):,.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
