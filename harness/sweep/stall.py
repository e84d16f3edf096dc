"""What a stalled point keeps: the window, the requests in flight, and the server's thread dump.

Why: a hung rank (sglang#30760, #42465) is diagnosed from where its threads wait; py-spy reads that from
the live process without stopping it, so the dump is taken the moment the stall is seen.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness.loadgen.tally import StallEvidence

PY_SPY_DUMP = "py-spy-dump.txt"
DUMP_TIMEOUT_S = 20.0


def stall_record(ev: StallEvidence, server_pid: int | None, pdir: Path) -> dict[str, Any]:
    """point.json's `stall`: the evidence, and the py-spy dump (saved beside it) or why there is none."""
    out: dict[str, Any] = {**ev.to_dict(), "reason": ev.reason()}
    out["thread_dump"] = _dump(server_pid, pdir)
    return out


def _dump(pid: int | None, pdir: Path) -> str:
    """The dump's file name, or why none was taken."""
    if pid is None:
        return "none: the server's process is not ours (attached), no pid to dump"
    exe = shutil.which("py-spy")
    if exe is None:
        return "none: py-spy is not installed (pip install py-spy)"
    try:
        r = subprocess.run(
            [exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=DUMP_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"none: py-spy dump failed: {e}"
    (pdir / PY_SPY_DUMP).write_text(r.stdout + r.stderr, encoding="utf-8")
    if r.returncode != 0:
        return (
            f"{PY_SPY_DUMP} (py-spy exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:200]})"
        )
    return PY_SPY_DUMP
