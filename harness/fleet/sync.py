"""What changed in a capture folder since it was last sent, packed as one checksummed batch.

The remote side of a unit keeps, per file, its inode and how many bytes went back. Append-only files
(`.jsonl`, `.log`) go back as the bytes appended since (whole lines only, until the run ends); other
files go back whole; a file moved aside (`requests.jsonl` → `requests.attempt-N.jsonl`) goes back as a
rename, so the driver never holds a record twice or loses one. A batch is a gzip'd tar of an index of
operations and their data, cut into chunks and verified by its SHA-256 on arrival.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

APPEND_ONLY = (".jsonl", ".log")
INDEX = "index.json"
TAIL = 4096
_MEMBER = re.compile(r"d/[0-9]+")


@dataclass
class _Sent:
    ino: int
    sent: int  # bytes the driver has (for append-only files: a prefix of the file)
    size: int
    mtime_ns: int
    tail: bytes = b""  # append-only files: the last bytes sent, to tell a continued file from a new one


@dataclass
class Batch:
    ops: list[dict[str, Any]]
    blobs: list[bytes]

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.blobs)


def _append_only(path: str) -> bool:
    return path.endswith(APPEND_ONLY)


class Tracker:
    """Files under `root` and what of them went back; `diff` returns the next batch of changes.

    Inode numbers are reused, so a file counts as continued (or moved) only when it still holds, at
    the offset sent, the last bytes that went back.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.state: dict[str, _Sent] = {}

    def _scan(self) -> dict[str, os.stat_result]:
        out: dict[str, os.stat_result] = {}
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.endswith(".tmp") or name.startswith(".write-test-"):
                    continue  # half-written: the rename that finishes it is picked up next time
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                out[p.relative_to(self.root).as_posix()] = st
        return out

    def _read(self, rel: str, offset: int, n: int = -1) -> bytes | None:
        try:
            with open(self.root / rel, "rb") as fh:
                fh.seek(offset)
                return fh.read(n)
        except FileNotFoundError:
            return None

    def _continues(self, rel: str, st: os.stat_result, s: _Sent) -> bool:
        """The file at `rel` is the one sent (same inode, still holding the bytes sent last)."""
        if st.st_ino != s.ino or st.st_size < s.sent or not s.tail:
            return False
        return self._read(rel, s.sent - len(s.tail), len(s.tail)) == s.tail

    def prime(self) -> None:
        """Everything here now is already on the driver (it sent it): only later changes go back."""
        self.state = {}
        for p, st in self._scan().items():
            tail = (self._read(p, max(0, st.st_size - TAIL), TAIL) or b"") if _append_only(p) else b""
            self.state[p] = _Sent(st.st_ino, st.st_size, st.st_size, st.st_mtime_ns, tail)

    def diff(self, final: bool) -> Batch:
        cur = self._scan()
        ops: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        for q, st in cur.items():  # moves first: the driver moves its copy before data lands on either name
            if q in self.state or not _append_only(q):
                continue
            for p, s in list(self.state.items()):
                gone = p not in cur or cur[p].st_ino != s.ino
                if gone and _append_only(p) and s.ino == st.st_ino and self._continues(q, st, s):
                    ops.append({"op": "rename", "from": p, "to": q})
                    self.state[q] = self.state.pop(p)
                    break
        for p in [p for p in self.state if p not in cur]:
            ops.append({"op": "delete", "path": p})
            del self.state[p]
        for q, st in sorted(cur.items()):
            prev = self.state.get(q)
            if prev and prev.ino == st.st_ino and prev.sent == st.st_size and prev.mtime_ns == st.st_mtime_ns:
                continue
            append_only = _append_only(q)
            offset = prev.sent if prev and append_only and self._continues(q, st, prev) else 0
            data = self._read(q, offset)
            if data is None:
                continue
            if append_only and not final:
                data = data[: data.rfind(b"\n") + 1]  # whole records only while the run goes on
            if not data and offset > 0:
                continue
            ops.append(
                {
                    "op": "write",
                    "path": q,
                    "offset": offset,
                    "append": append_only,
                    "member": f"d/{len(blobs)}",
                }
            )
            blobs.append(data)
            tail = ((prev.tail if offset else b"") + data)[-TAIL:] if append_only and prev else data[-TAIL:]
            if not append_only:
                tail = b""
            self.state[q] = _Sent(st.st_ino, offset + len(data), st.st_size, st.st_mtime_ns, tail)
        return Batch(ops, blobs)


def pack(batch: Batch) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name, data in [
            (INDEX, json.dumps(batch.ops).encode()),
            *((f"d/{i}", b) for i, b in enumerate(batch.blobs)),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack(data: bytes) -> Batch:
    """A batch's operations and data; anything but an index and numbered data members is refused."""
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile() or (m.name != INDEX and not _MEMBER.fullmatch(m.name)):
                raise ValueError(f"unexpected member {m.name!r} in a batch")
            fh = tar.extractfile(m)
            members[m.name] = fh.read() if fh else b""
    ops = json.loads(members.pop(INDEX))
    blobs = [members[f"d/{i}"] for i in range(len(members))]
    return Batch(ops, blobs)


def chunks(payload: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(payload), size):
        yield payload[i : i + size]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def safe_relpath(path: str, node: str) -> Path:
    """A path a unit may write: relative, under its node's folder, no `..`."""
    p = Path(path)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] != node or len(p.parts) < 2:
        raise ValueError(f"path {path!r} is outside capture/{node}")
    return p


def extract_seed(data: bytes, root: Path, node: str) -> int:
    """Unpack the driver's capture of a unit into the remote capture root; returns the file count."""
    n = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for m in tar.getmembers():
            rel = safe_relpath(m.name, node) if m.name != node else None
            if rel is None or m.isdir():
                continue
            if not m.isfile():
                raise ValueError(f"unexpected member {m.name!r} in the seed")
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            fh = tar.extractfile(m)
            dst.write_bytes(fh.read() if fh else b"")
            os.utime(dst, (m.mtime, m.mtime))
            n += 1
    return n
