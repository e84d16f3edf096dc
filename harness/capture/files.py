"""Where things live in a capture folder, and append-only writing that survives crashes.

capture/<node>/<experiment>/manifest.json
capture/<node>/<experiment>/<server>/server.log, server_info.json
capture/<node>/<experiment>/<server>/<point>/requests.jsonl, telemetry.jsonl,
    metrics-before.prom, metrics-after.prom, point.json (written last)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.capture.jsoncodec import dumps_line

REQUESTS = "requests.jsonl"
METRICS = "metrics.jsonl"  # the /metrics timeline (harness.telemetry.timeline writes it)
TELEMETRY = "telemetry.jsonl"
POINT = "point.json"
MANIFEST = "manifest.json"
SERVER_LOG = "server.log"
SERVER_INFO = "server_info.json"
METRICS_BEFORE = "metrics-before.prom"
METRICS_AFTER = "metrics-after.prom"
# a replicas profile (harness.servers.replicas): replicas.json in the server folder; per worker a server folder
# workers/w<i>/ and in each point <point>/workers/w<i>/metrics-*.prom; the gateway's router-metrics-*.prom
REPLICAS = "replicas.json"
WORKERS_DIR = "workers"
ROUTER_METRICS_BEFORE = "router-" + METRICS_BEFORE
ROUTER_METRICS_AFTER = "router-" + METRICS_AFTER


def point_name(sweep: dict[str, Any], seed: int) -> str:
    """Folder name of one sweep point x seed, e.g. `groups=16,seed=0` (`seed=0` with no sweep)."""
    parts = [f"{k}={v}" for k, v in sweep.items()]
    parts.append(f"seed={seed}")
    return ",".join(parts)


def experiment_dir(root: Path, node: str, experiment: str) -> Path:
    return Path(root) / node / experiment


def server_dir(root: Path, node: str, experiment: str, server: str) -> Path:
    return experiment_dir(root, node, experiment) / server


def point_dir(root: Path, node: str, experiment: str, server: str, point: str) -> Path:
    return server_dir(root, node, experiment, server) / point


class JsonlWriter:
    """Append one JSON object per line, handed to the OS the moment it is written: a crash loses nothing.

    One O_APPEND write per line (a few µs): a `kill -9` of the harness loses only what was never
    written (requests still in flight), never a finished record; close() fsyncs. Takes dicts or
    dataclass records (their fields, without the deep copy of dataclasses.asdict).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, obj: Any) -> None:
        data = dumps_line(obj if isinstance(obj, dict) else obj.__dict__)
        while data:  # a regular file takes it whole; loop for the pathological partial write
            data = data[os.write(self._fd, data) :]  # type: ignore[arg-type]

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write via a temp file and rename, so a reader never sees half a point.json."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every complete JSON line, and how many lines were unreadable (e.g. a line cut by kill -9)."""
    rows: list[dict[str, Any]] = []
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(obj, dict):
                rows.append(obj)
            else:
                bad += 1
    return rows, bad


def read_json_dict(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when missing, unreadable or not an object (the caller decides what that means)."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None
