"""The body of a fleet unit on its Ray node: `harness bench` as a subprocess, its capture streamed back.

A generator: it yields a `start` message (where it runs), then batches of what changed in the capture
(chunks, then the batch's size and SHA-256) every `stream_every_s` while bench runs and once more when it
ends, then `end` (bench's exit code and the tail of its output). Bench samples NVML itself, on the GPUs
Ray gave the task (CUDA_VISIBLE_DEVICES). The driver wraps this in `ray.remote`; Ray is imported here only
to name the node.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import __version__
from harness.fleet.sync import Tracker, chunks, extract_seed, pack, sha256

CHUNK_BYTES = 4 * 2**20
_PR_SET_PDEATHSIG = 1


def run_unit(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    node, server = payload["node"], payload["server"]
    work = Path(tempfile.mkdtemp(prefix=f"harness-fleet-{node}-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        capture = work / "capture"
        capture.mkdir()
        seeded = extract_seed(payload["seed"], capture, node) if payload.get("seed") else 0
        spec_files = []
        for i, (name, text) in enumerate(payload["specs"]):
            f = work / "specs" / f"{i}-{name}"
            f.parent.mkdir(exist_ok=True)
            f.write_text(text, encoding="utf-8")
            spec_files.append(str(f))
        tracker = Tracker(capture)
        tracker.prime()
        argv = [
            sys.executable, "-m", "harness", "bench", "--node", node, "--spec", *spec_files,
            "--server", payload["server_glob"], "--server-kind", payload["server_kind"],
            "--capture", str(capture), "--summaries", str(work / "summaries"), "--quiet",
            *(["--model", payload["model"]] if payload.get("model") else []),
            *payload.get("bench_args", []),
        ]  # fmt: skip
        host, node_id = socket.gethostname(), _node_id()
        yield {
            "type": "start",
            "host": host,
            "node_id": node_id,
            "pid": os.getpid(),
            "harness_version": __version__,
            "seeded_files": seeded,
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
        log_path = capture / node / "fleet-logs" / f"{server}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            head = f"== attempt {payload.get('attempt', 1)} on {host} (node {node_id}, pid {os.getpid()})"
            log.write(f"{head}: {' '.join(argv[1:])}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                argv, cwd=work, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent, close_fds=True,
            )  # fmt: skip
        every = float(payload.get("stream_every_s", 2.0))
        batch_no = 0
        while True:
            done = _wait(proc, every)
            batch = tracker.diff(final=done)
            if batch.ops:
                batch_no += 1
                yield from _send(batch_no, pack(batch), len(batch.ops))
            elif not done:
                yield {"type": "tick"}  # nothing new: lets the driver see a stop request between batches
            if done:
                break
        yield {"type": "end", "exit_code": proc.returncode, "tail": _tail(log_path)}
    finally:
        if proc is not None and proc.poll() is None:  # the driver went away: stop bench (its servers follow)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def _send(batch_no: int, data: bytes, nops: int) -> Iterator[dict[str, Any]]:
    pieces = list(chunks(data, CHUNK_BYTES))
    for piece in pieces:
        yield {"type": "chunk", "batch": batch_no, "data": piece}
    yield {
        "type": "batch",
        "batch": batch_no,
        "size": len(data),
        "sha256": sha256(data),
        "chunks": len(pieces),
        "ops": nops,
    }


def _wait(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return True
        time.sleep(min(0.1, seconds))
    return proc.poll() is not None


def _die_with_parent() -> None:
    """Bench dies with the Ray worker (a lost node): its servers die with it (they watch bench the same way)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _tail(path: Path, nbytes: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - nbytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (tests of the body alone)
        return None
