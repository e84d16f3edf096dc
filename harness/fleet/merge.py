"""Apply a verified batch to the driver's capture/<node>/…, never trading a more complete capture for less.

Rules: appended bytes land only at the offset the driver's copy ends at (a replay is recognised and
skipped); a point.json that says ok is never replaced by one that does not, nor deleted; data files are
never deleted (only moved, as the remote moved them); a manifest's servers are merged, since units of
one group each add their own. Bytes that fit none of these go beside the file as `<name>.conflict-<tag>`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture import MANIFEST, POINT
from harness.capture.files import read_json_dict
from harness.capture.points import is_done
from harness.fleet.sync import Batch, safe_relpath


@dataclass
class MergeStats:
    written: int = 0  # files created, replaced or appended to
    bytes: int = 0
    renamed: int = 0
    deleted: int = 0
    kept: list[str] = field(default_factory=list)  # incoming files refused: the driver's was more complete
    conflicts: list[str] = field(default_factory=list)  # bytes written aside


class Merger:
    """One attempt's view of the driver's capture: remembers which files went aside for this attempt."""

    def __init__(self, root: Path, node: str, tag: str) -> None:
        self.root, self.node, self.tag = Path(root), node, tag
        self.aside: dict[str, Path] = {}
        self.stats = MergeStats()

    def apply(self, batch: Batch) -> None:
        for op in batch.ops:
            kind = op.get("op")
            if kind == "rename":
                self._rename(op["from"], op["to"])
            elif kind == "delete":
                self._delete(op["path"])
            elif kind == "write":
                idx = int(str(op["member"]).split("/", 1)[1])
                data = batch.blobs[idx]
                if op.get("append"):
                    self._append(op["path"], int(op["offset"]), data)
                else:
                    self._replace(op["path"], data)
            else:
                raise ValueError(f"unknown operation {kind!r} in a batch")

    # ------------------------------------------------------------------ operations

    def _path(self, rel: str) -> Path:
        return self.root / safe_relpath(rel, self.node)

    def _rename(self, src_rel: str, dst_rel: str) -> None:
        src, dst = self._path(src_rel), self._path(dst_rel)
        if src.name == POINT or not src.exists():
            return
        if dst.exists():  # the driver has both already (a replayed batch): keep both
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        if src_rel in self.aside:
            self.aside[dst_rel] = self.aside.pop(src_rel)
        self.stats.renamed += 1

    def _delete(self, rel: str) -> None:
        p = self._path(rel)
        if p.name != POINT or not p.exists() or is_done(read_json_dict(p)):
            return  # only a not-ok point.json is dropped (bench moved its attempt aside); records never are
        p.unlink()
        self.stats.deleted += 1

    def _append(self, rel: str, offset: int, data: bytes) -> None:
        if rel in self.aside:
            self._write_aside(rel, data)
            return
        p = self._path(rel)
        have = p.stat().st_size if p.exists() else 0
        if have == offset:
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "ab") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            self._count(data)
            return
        if have > offset:
            with open(p, "rb") as fh:
                fh.seek(offset)
                if fh.read(len(data)) == data:
                    return  # already here
            if offset == 0:
                with open(p, "rb") as fh:
                    old = fh.read()
                if data.startswith(old):  # the driver's copy is a prefix: the incoming one is more complete
                    self._atomic_bytes(p, data)
                    self._count(data)
                    return
        self.aside[rel] = p.with_name(f"{p.name}.conflict-{self.tag}")
        self._write_aside(rel, data)

    def _write_aside(self, rel: str, data: bytes) -> None:
        q = self.aside[rel]
        with open(q, "ab") as fh:
            fh.write(data)
        if str(q) not in self.stats.conflicts:
            self.stats.conflicts.append(str(q))
        self._count(data)

    def _replace(self, rel: str, data: bytes) -> None:
        p = self._path(rel)
        if p.name == POINT:
            old = read_json_dict(p)
            try:
                new = json.loads(data)
            except ValueError:
                new = None
            if is_done(old) and not is_done(new if isinstance(new, dict) else None):
                self.stats.kept.append(rel)
                return
        elif p.name == MANIFEST:
            data = _merged_manifest(read_json_dict(p), data)
        self._atomic_bytes(p, data)
        self._count(data)

    def _atomic_bytes(self, p: Path, data: bytes) -> None:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".fleet-tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)

    def _count(self, data: bytes) -> None:
        self.stats.written += 1
        self.stats.bytes += len(data)


def _merged_manifest(old: dict[str, Any] | None, data: bytes) -> bytes:
    """The incoming manifest with every server entry the driver's already had (other units' servers)."""
    try:
        new = json.loads(data)
    except ValueError:
        return data
    if not isinstance(new, dict) or not old:
        return data
    servers = {**(old.get("servers") or {}), **(new.get("servers") or {})}
    new["servers"] = servers
    buf = json.dumps(new, indent=2, default=str) + "\n"
    return buf.encode()
