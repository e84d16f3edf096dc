"""The fleet driver: one Ray task per unit, batches merged into capture/<node>/ as they arrive, retries.

A unit whose node is lost (the task fails with a Ray system error, not bench's own) is sent again with
everything the driver has of it, so the next node's bench resumes: points already ok are not run
again, and nothing that reached the driver is lost. Bench's exit 2 (bad input) is not retried.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.fleet.config import FleetFile, NodeGroup
from harness.fleet.merge import Merger
from harness.fleet.sync import sha256, unpack
from harness.fleet.units import Unit

Log = Callable[[str], None]


@dataclass
class Attempt:
    n: int
    host: str | None = None
    node_id: str | None = None
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES Ray gave the task
    batches: int = 0
    bytes: int = 0  # packed bytes received and verified
    checksums: list[str] = field(default_factory=list)  # SHA-256 of each verified batch
    files_written: int = 0
    kept: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    exit_code: int | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class UnitResult:
    node: str
    server: str
    status: str  # ok | incomplete | failed | complete-before (not sent)
    points_total: int
    points_ok: int
    reason: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    searches_total: int = 0  # the unit's capacity searches (harness.sweep.search): no point count ahead
    searches_done: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def connect(fleet: FleetFile) -> str:
    """ray.init for `ray_address`: auto (a running cluster), local (start one here) or an address."""
    import ray

    if ray.is_initialized():  # a caller (a test, a notebook) already connected
        return str(ray.get_runtime_context().gcs_address)
    kw: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    if fleet.runtime_env:
        kw["runtime_env"] = fleet.runtime_env
    if fleet.ray_address == "local":
        ray.init(include_dashboard=False, **kw)
    else:
        ray.init(address=fleet.ray_address, **kw)
    return str(ray.get_runtime_context().gcs_address)


def feasible(group: NodeGroup) -> list[str]:
    """Alive Ray nodes that offer the group's resources, GPUs and CPUs (their node ids)."""
    import ray

    need = {**group.resources, "GPU": group.gpus, "CPU": group.cpus}
    return [
        n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive") and all(n.get("Resources", {}).get(r, 0) >= a for r, a in need.items() if a > 0)
    ]


class FleetRun:
    def __init__(self, fleet: FleetFile, units: list[Unit], log: Log) -> None:
        import ray

        from harness.fleet.remote import run_unit

        self.fleet, self.units, self.log = fleet, units, log
        self.lock = threading.Lock()  # one merge at a time: units of a group share manifest.json
        self.stop = threading.Event()
        self.task = ray.remote(max_retries=0)(run_unit)
        self.spec_texts = {
            id(s): (Path(s.source_path).name, Path(s.source_path).read_text(encoding="utf-8"))  # type: ignore[arg-type]
            for u in units
            for s in u.specs
        }

    def run(self) -> list[UnitResult]:
        with ThreadPoolExecutor(max_workers=max(1, len(self.units)), thread_name_prefix="unit") as ex:
            futures = [ex.submit(self._unit_safe, u) for u in self.units]
            try:
                return [f.result() for f in futures]
            except KeyboardInterrupt:
                self.stop.set()
                raise

    def _unit_safe(self, unit: Unit) -> UnitResult:
        try:
            return self._unit(unit)
        except Exception as e:  # noqa: BLE001 - one unit's driver-side failure must not hide the others
            self.log(f"{unit.key}: driver error: {e!r}\n{traceback.format_exc(limit=3)}")
            return self._result(unit, "failed", f"driver error: {e!r}", [])

    def _result(self, unit: Unit, status: str, reason: str | None, attempts: list[Attempt]) -> UnitResult:
        ok = unit.ok_points(self.fleet.capture)
        searched = unit.searches_done(self.fleet.capture)
        if status == "done":
            status = "ok" if ok == len(unit.points) and searched == len(unit.searches) else "incomplete"
            if status == "incomplete":
                short = [f"{len(unit.points) - ok} points not ok"] if ok < len(unit.points) else []
                if searched < len(unit.searches):
                    short.append(f"{len(unit.searches) - searched} searches not finished")
                reason = reason or f"{' and '.join(short)} after bench's own retries"
        n_pts, n_search = len(unit.points), len(unit.searches)
        return UnitResult(
            unit.group.name, unit.server, status, n_pts, ok, reason, attempts, n_search, searched
        )

    def _unit(self, unit: Unit) -> UnitResult:
        import ray

        cap = self.fleet.capture
        if unit.complete(cap):
            self.log(
                f"{unit.key}: all already ok in {cap / unit.group.name} ({unit.progress(cap)}): not sent"
            )
            return self._result(unit, "complete-before", None, [])
        attempts: list[Attempt] = []
        tries = int(self.fleet.retries) + 1
        for n in range(1, tries + 1):
            if not self._wait_feasible(unit.group):
                reason = f"no alive Ray node offers {_needs(unit.group)} (waited {self.fleet.node_wait_s:g}s)"
                self.log(f"{unit.key}: failed: {reason}")
                return self._result(unit, "failed", reason, attempts)
            att = Attempt(n)
            attempts.append(att)
            with self.lock:
                seed = unit.seed_tar(cap)
                have = unit.progress(cap)
            payload = {
                "node": unit.group.name,
                "server": unit.server,
                "server_glob": unit.server_glob(),
                "server_kind": unit.group.server_kind,
                "model": unit.group.model,
                "bench_args": list(unit.group.bench_args),
                "specs": [self.spec_texts[id(s)] for s in unit.specs],
                "seed": seed,
                "stream_every_s": self.fleet.stream_every_s,
                "attempt": n,
            }
            opts: dict[str, Any] = {"num_cpus": unit.group.cpus, "num_gpus": unit.group.gpus}
            if unit.group.resources:
                opts["resources"] = dict(unit.group.resources)
            self.log(
                f"{unit.key}: attempt {n}/{tries}: sent ({have} already, "
                f"{len(seed)} bytes of capture with it)"
            )
            t0 = time.monotonic()
            try:
                self._consume(unit, att, self.task.options(**opts).remote(payload))
            except ray.exceptions.RayTaskError as e:  # the unit's own code raised: not a node problem
                att.error = _line(e, last=True)
                return self._result(unit, "failed", f"remote error: {att.error}", attempts)
            except ray.exceptions.RayError as e:  # node or worker lost: send it again
                att.error = f"{type(e).__name__}: {_line(e)}"
                att.seconds = time.monotonic() - t0
                self.log(
                    f"{unit.key}: attempt {n} lost on {att.host or '?'} (node {(att.node_id or '?')[:12]}) after "
                    f"{att.batches} batches: {att.error}"
                    + ("; sending it again" if n < tries else "; no retries left")
                )
                continue
            att.seconds = time.monotonic() - t0
            if att.exit_code == 2:
                return self._result(unit, "failed", f"harness bench exit 2: {att.error}", attempts)
            return self._result(unit, "done", None, attempts)
        return self._result(unit, "failed", f"lost {tries} times: {attempts[-1].error}", attempts)

    def _wait_feasible(self, group: NodeGroup) -> bool:
        deadline = time.monotonic() + self.fleet.node_wait_s
        while not feasible(group):
            if time.monotonic() >= deadline or self.stop.is_set():
                return False
            time.sleep(1.0)
        return True

    def _consume(self, unit: Unit, att: Attempt, gen: Any) -> None:

        merger = Merger(self.fleet.capture, unit.group.name, f"attempt{att.n}-{int(time.time())}")
        try:
            self._messages(unit, att, gen, merger)
        finally:
            att.files_written = merger.stats.written
            att.kept, att.conflicts = merger.stats.kept, merger.stats.conflicts

    def _messages(self, unit: Unit, att: Attempt, gen: Any, merger: Merger) -> None:
        import ray

        parts: list[bytes] = []
        for ref in gen:
            if self.stop.is_set():
                ray.cancel(gen)
                raise KeyboardInterrupt
            msg = ray.get(ref)
            kind = msg.get("type")
            if kind == "start":
                att.host, att.node_id, att.gpus = msg.get("host"), msg.get("node_id"), msg.get("gpus")
                self.log(
                    f"{unit.key}: running on {att.host} (node {str(att.node_id)[:12]}, pid {msg.get('pid')}, "
                    f"GPUs {att.gpus if att.gpus is not None else 'all'}, harness {msg.get('harness_version')}, "
                    f"{msg.get('seeded_files')} files resumed from)"
                )
                if msg.get("harness_version") != __version__:
                    self.log(
                        f"{unit.key}: note: the node runs harness {msg.get('harness_version')}, the driver {__version__}"
                    )
            elif kind == "chunk":
                parts.append(msg["data"])
            elif kind == "batch":
                data = b"".join(parts)
                parts = []
                digest = sha256(data)
                if len(data) != msg["size"] or digest != msg["sha256"]:
                    raise RuntimeError(
                        f"batch {msg['batch']}: checksum mismatch ({len(data)} bytes, sha256 {digest[:12]}, "
                        f"expected {msg['size']} bytes, {str(msg['sha256'])[:12]})"
                    )
                with self.lock:
                    merger.apply(unpack(data))
                att.batches += 1
                att.bytes += len(data)
                att.checksums.append(digest)
                self.log(
                    f"{unit.key}: batch {msg['batch']}: {msg['ops']} changes, {len(data)} bytes, "
                    f"sha256 {digest[:12]} verified"
                )
            elif kind == "end":
                att.exit_code = int(msg["exit_code"])
                lines = [ln for ln in str(msg.get("tail") or "").splitlines() if ln.strip()]
                att.error = lines[-1] if att.exit_code and lines else None
                self.log(f"{unit.key}: harness bench exited {att.exit_code} on {att.host}")


def _needs(group: NodeGroup) -> str:
    parts = [f"{k}: {v:g}" for k, v in group.resources.items()]
    if group.gpus:
        parts.append(f"GPU: {group.gpus:g}")
    parts.append(f"CPU: {group.cpus:g}")
    return "{" + ", ".join(parts) + "}"


def _line(e: BaseException, last: bool = False) -> str:
    """One line of a Ray error: a task error's last (the exception), a system error's first."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    line = (lines[-1] if last else lines[0]) if lines else type(e).__name__
    return line if len(line) <= 200 else line[:197] + "..."
