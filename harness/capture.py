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

REQUESTS = "requests.jsonl"
TELEMETRY = "telemetry.jsonl"
POINT = "point.json"
MANIFEST = "manifest.json"
SERVER_LOG = "server.log"
SERVER_INFO = "server_info.json"
METRICS_BEFORE = "metrics-before.prom"
METRICS_AFTER = "metrics-after.prom"


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
    """Append one JSON object per line and flush it to the OS at once: a crash loses nothing written."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - long-lived

    def write(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

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
