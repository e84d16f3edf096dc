"""A bailian session trace (harness.workloads.bailian's format) as a `harness whatif` input, offline as a
Mooncake file: keys are the file's block ids (16 tokens each, the trace's own), requests in recorded time
order, each carrying its session, turn and recorded gap after the previous turn."""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import HarnessError
from harness.whatif.trace import Trace, TraceRequest
from harness.workloads.bailian import BAILIAN_BLOCK, bailian_line, session_roots
from harness.workloads.trace_files import objects


def is_bailian(path: Path) -> bool:
    """The file's first object has bailian's session fields (`chat_id`, `parent_chat_id`)."""
    try:
        with path.open() as f:
            for line in f:
                if line.strip():
                    obj = json.loads(line)
                    return isinstance(obj, dict) and "chat_id" in obj and "parent_chat_id" in obj
    except (OSError, ValueError):
        return False  # read_mooncake says what is wrong with it
    return False


def read_bailian(path: Path) -> Trace:
    """Every line, checked as the load generator checks it (one error naming the file, line and field)."""
    lines = [bailian_line(path, no, obj) for no, obj in objects(path)]
    if not lines:
        raise HarnessError(f"{path}: no requests")
    t0 = min(ln.timestamp_s for ln in lines)
    sessions: dict[int, int] = {}
    last: dict[int, float] = {}
    turns: dict[int, int] = {}
    reqs = []
    order = sorted(range(len(lines)), key=lambda i: (lines[i].timestamp_s, i))
    roots = session_roots(lines)
    for i in order:
        ln, root = lines[i], roots[i]
        s = sessions.setdefault(root, len(sessions))
        turn = turns.get(s, 0)
        turns[s] = turn + 1
        gap = ln.timestamp_s - last[s] if s in last else 0.0
        last[s] = ln.timestamp_s
        reqs.append(
            TraceRequest(
                ln.hash_ids,
                ln.input_length,
                ln.timestamp_s - t0,
                ln.output_length,
                session=s,
                turn=turn,
                index=i,
                conversation=s,
                gap=max(0.0, gap),
            )
        )
    return Trace(path.stem, reqs, unit=BAILIAN_BLOCK, kind="blocks")
