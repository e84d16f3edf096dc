"""A point folder's state on disk: its point.json, its attempt number, earlier attempts' records.

The resume rule lives here: a point whose point.json says ok is done; anything else runs again as
attempt N+1, with the earlier attempt's records kept aside as requests.attempt-N.jsonl.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture.files import METRICS, POINT, REQUESTS, read_json_dict, write_json_atomic
from harness.capture.jsoncodec import loads_tally


def read_point(pdir: Path) -> dict[str, Any] | None:
    """A point's point.json, or None when missing or unreadable (the point then runs again)."""
    return read_json_dict(Path(pdir) / POINT)


def is_done(old: dict[str, Any] | None) -> bool:
    """The resume decision: only a point.json that says ok keeps a point from running again."""
    return bool(old) and old.get("status") == "ok"  # type: ignore[union-attr]


def next_attempt(pdir: Path, old: dict[str, Any] | None) -> int:
    """The attempt number of the next run: one past point.json's, 2 when only records of a run are left."""
    if old:
        return int(old.get("attempt", 1)) + 1
    return 2 if (Path(pdir) / REQUESTS).exists() else 1


def move_aside(pdir: Path) -> None:
    """Keep an earlier attempt's records and /metrics timeline as requests.attempt-N.jsonl and
    metrics.attempt-N.jsonl (one N for both) and drop its point.json: one file holds one run, and a fleet
    sends each back as a rename, never as bytes that contradict what the driver holds."""
    req = pdir / REQUESTS
    if req.exists() or (pdir / METRICS).exists():
        n = 1
        while any((pdir / f"{Path(name).stem}.attempt-{n}.jsonl").exists() for name in (REQUESTS, METRICS)):
            n += 1
        for name in (REQUESTS, METRICS):
            with contextlib.suppress(FileNotFoundError):
                os.replace(pdir / name, pdir / f"{Path(name).stem}.attempt-{n}.jsonl")
    with contextlib.suppress(FileNotFoundError):
        (pdir / POINT).unlink()


def mark_failed(pdir: Path, failure: str, *, server_died: bool = False, exit_code: int | None = None) -> None:
    """Rewrite a written point.json as failed with the reason; `server_died` (with its exit code) when the
    server died during the point: the crashed verdict reads these fields, never the reason's wording."""
    rec = read_point(pdir)
    if rec is None:
        return
    rec["status"] = "failed"
    rec["failure"] = failure
    if server_died:
        rec["server_died"] = True
        rec["server_exit_code"] = exit_code
    write_json_atomic(pdir / POINT, rec)


def measured(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request rows every figure is made of: sent, and not warm-up (skipped and unsent rows only count)."""
    return [r for r in rows if not r.get("warmup") and not r.get("not_sent")]


@dataclass
class RequestCounts:
    """requests.jsonl tallied: measured requests by outcome; warm-up ones apart."""

    ok: int = 0
    failed: int = 0
    skipped: int = 0  # an earlier turn of the session failed
    not_sent: int = 0  # duration_s ran out first
    warmup: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # failures by error_kind


def count_requests(pdir: Path) -> RequestCounts:
    """The tally from requests.jsonl itself, so point.json matches what a reader sees.

    Read as bytes and parsed by jsoncodec (orjson when installed): with json.loads this pass cost ~50 µs
    per record, a tenth of a run's client CPU.
    """
    c = RequestCounts()
    req = pdir / REQUESTS
    if req.exists():
        with open(req, "rb") as f:
            for line in f:
                try:
                    row = loads_tally(line)
                except ValueError:
                    continue
                if not isinstance(row, dict):
                    continue
                if row.get("warmup"):
                    c.warmup += 1
                elif row.get("not_sent") == "skipped":
                    c.skipped += 1
                elif row.get("not_sent"):
                    c.not_sent += 1
                elif row.get("ok"):
                    c.ok += 1
                else:
                    c.failed += 1
                    k = row.get("error_kind") or "unknown"
                    c.errors[k] = c.errors.get(k, 0) + 1
    return c
