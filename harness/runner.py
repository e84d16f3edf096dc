"""Run one sweep point x seed against a live server and write its capture folder; loop with resume.

Per point: flush the cache -> metrics-before.prom -> telemetry on -> load -> telemetry off ->
metrics-after.prom -> point.json (atomic, last). A point whose point.json says ok is never re-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx

from harness import __version__
from harness.capture import (
    MANIFEST,
    METRICS_AFTER,
    METRICS_BEFORE,
    POINT,
    REQUESTS,
    experiment_dir,
    point_dir,
    point_name,
    write_json_atomic,
)
from harness.errors import HarnessError
from harness.loadgen import RunIds, normalize_base_url, run_schedule
from harness.records import PointRecord
from harness.spec import ExperimentSpec, Point
from harness.workloads import PromptMaker, build_schedule, load_prompt_maker

Telemetry = Callable[[Path], Any]  # (point_dir) -> context manager whose __enter__ has .status
FLUSH_TRIES = 60
FLUSH_WAIT_S = 0.5


def flush_cache(
    base_url: str,
    *,
    tries: int = FLUSH_TRIES,
    wait_s: float = FLUSH_WAIT_S,
    headers: dict[str, str] | None = None,
) -> tuple[bool | None, str | None]:
    """POST /flush_cache until it succeeds; (None, note) when the server has no such endpoint."""
    url = normalize_base_url(base_url) + "/flush_cache"
    last = ""
    for i in range(tries):
        try:
            # the spec's headers too: a server started with --api-key refuses an unauthenticated flush
            r = httpx.post(url, timeout=30.0, headers=headers)
        except httpx.HTTPError as e:
            return False, f"flush failed: {type(e).__name__}: {e}"
        if r.status_code in (404, 405):
            return None, f"no flush endpoint (HTTP {r.status_code})"
        if r.status_code == 200:
            return True, None if i == 0 else f"flushed after {i + 1} tries"
        last = f"HTTP {r.status_code}: {r.text.strip()[:200]}"
        # SGLang answers 400 with a generic text (the "pending requests" reason is only in its log)
        if "pending" not in r.text.lower() and r.status_code not in (400, 503):
            return False, f"flush refused: {last}"
        time.sleep(wait_s)
    return False, f"not flushed after {tries} tries ({last})"


def fetch_metrics(base_url: str, dest: Path, headers: dict[str, str] | None = None) -> bool:
    """Save raw /metrics text when the server answers 200; say whether it did."""
    try:
        r = httpx.get(normalize_base_url(base_url) + "/metrics", timeout=10.0, headers=headers)
    except httpx.HTTPError:
        return False
    if r.status_code != 200:
        return False
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(r.text, encoding="utf-8")
    os.replace(tmp, dest)
    return True


READY_WAIT_S = 300.0


def check_server(base_url: str, timeout: float = 5.0, ready_wait_s: float = READY_WAIT_S) -> None:
    """Fail fast with one line when nothing listens at the URL; wait while /health says 503 (loading)."""
    url = normalize_base_url(base_url)
    if not url.startswith(("http://", "https://")):
        raise HarnessError(f"--server-url: expected http://HOST:PORT, got {base_url!r}")
    deadline = time.monotonic() + ready_wait_s
    while True:
        try:
            r = httpx.get(url + "/health", timeout=timeout)
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise HarnessError(f"--server-url: cannot reach {base_url} ({type(e).__name__}: {e})") from None
        # 503 is SGLang's "not ready yet" (weights loading, warm-up): requests sent now would fail
        if r.status_code != 503:
            return
        if time.monotonic() >= deadline:
            raise HarnessError(
                f"--server-url: {base_url} not ready after {ready_wait_s:g}s (/health answers 503)"
            )
        time.sleep(0.25)


def _status(ok: int, failed: int, scheduled: int, max_failed_fraction: float) -> str:
    if failed == 0 and ok == scheduled:
        return "ok"
    if ok == 0:
        return "failed"
    return "partial" if failed / max(scheduled, 1) <= max_failed_fraction else "failed"


def _move_aside(pdir: Path) -> None:
    """Keep an earlier attempt's records as requests.attempt-N.jsonl and drop its point.json."""
    req = pdir / REQUESTS
    if req.exists():
        n = 1
        while (pdir / f"requests.attempt-{n}.jsonl").exists():
            n += 1
        os.replace(req, pdir / f"requests.attempt-{n}.jsonl")
    with contextlib.suppress(FileNotFoundError):
        (pdir / POINT).unlink()


def run_point(
    spec: ExperimentSpec,
    point: Point,
    seed: int,
    *,
    base_url: str,
    server_name: str,
    node: str,
    capture_root: Path,
    quiet: bool = True,
    telemetry: Telemetry | None = None,
    attempt: int = 1,
    prompt_maker: PromptMaker | None = None,
) -> PointRecord:
    """One point x seed: its folder, requests.jsonl and point.json (written last, also on Ctrl-C)."""
    pname = point_name(point.sweep, seed)
    pdir = point_dir(Path(capture_root), node, spec.name, server_name, pname)
    pdir.mkdir(parents=True, exist_ok=True)
    _move_aside(pdir)
    schedule = build_schedule(
        spec, point.workload, seed, prompt_maker
    )  # tokenizing happens here, not mid-run
    start_mono, start_wall = time.monotonic(), time.time()
    headers = spec.resolved_headers()
    flushed, note = flush_cache(base_url, headers=headers)
    fetch_metrics(base_url, pdir / METRICS_BEFORE, headers)
    status: str = "failed"
    failure: str | None = None
    res = tel = None
    try:
        with telemetry(pdir) if telemetry else contextlib.nullcontext(None) as tel:
            res = asyncio.run(
                run_schedule(
                    schedule,
                    base_url=base_url,
                    api=spec.api,
                    model=spec.model,
                    concurrency=point.concurrency,
                    out_path=pdir / REQUESTS,
                    ids=RunIds(spec.name, server_name, pname, seed),
                    request_rate=point.request_rate,
                    headers=headers,
                    timeouts=spec.timeouts,
                    quiet=quiet,
                    label=f"{server_name} {pname}",
                )
            )
        status = _status(res.ok, res.failed, res.scheduled, spec.max_failed_fraction)
        if status != "ok":
            failure = (
                ", ".join(f"{k}: {v}" for k, v in sorted(res.errors.items())) or "requests not completed"
            )
    except KeyboardInterrupt:
        # point.json says "interrupted" (so resume re-runs it), then the interrupt goes on up
        status, failure, res = "interrupted", "interrupted by the user (Ctrl-C)", None
    if res is not None:
        fetch_metrics(base_url, pdir / METRICS_AFTER, headers)
    telemetry_status = getattr(tel, "status", None)  # read after the sampler stopped: its last word
    rec = _write_point(
        spec,
        pdir,
        pname,
        seed,
        point,
        status,
        schedule_len=len(schedule),
        start=(start_mono, start_wall),
        flushed=flushed,
        note=note,
        attempt=attempt,
        failure=failure,
        telemetry_status=telemetry_status,
    )
    if status == "interrupted":
        raise KeyboardInterrupt
    return rec


def _write_point(
    spec,
    pdir,
    pname,
    seed,
    point,
    status,
    *,
    schedule_len,
    start,
    flushed,
    note,
    attempt,
    failure,
    telemetry_status,
) -> PointRecord:
    """Counts come from the file itself, so they match what a reader of requests.jsonl sees."""
    ok = failed = 0
    errors: dict[str, int] = {}
    req = pdir / REQUESTS
    if req.exists():
        with open(req, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("ok"):
                    ok += 1
                else:
                    failed += 1
                    k = row.get("error_kind") or "unknown"
                    errors[k] = errors.get(k, 0) + 1
    rec = PointRecord(
        experiment=spec.name,
        server=pdir.parent.name,
        point=pname,
        seed=seed,
        sweep=dict(point.sweep),
        status=status,  # type: ignore[arg-type]
        requests_scheduled=schedule_len,
        requests_ok=ok,
        requests_failed=failed,
        errors=errors,
        start_mono=start[0],
        end_mono=time.monotonic(),
        start_wall=start[1],
        end_wall=time.time(),
        flushed=flushed,
        flush_note=note,
        attempt=attempt,
        failure=failure,
        telemetry_status=telemetry_status,
    )
    write_json_atomic(pdir / POINT, rec.to_dict())
    return rec


def read_point(pdir: Path) -> dict[str, Any] | None:
    """A point's point.json, or None when missing or unreadable (the point then runs again)."""
    return _read_dict(pdir / POINT)


def next_attempt(pdir: Path, old: dict[str, Any] | None) -> int:
    """The attempt number of the next run: one past point.json's, 2 when only records of a run are left."""
    if old:
        return int(old.get("attempt", 1)) + 1
    return 2 if (pdir / REQUESTS).exists() else 1


def load_manifest(edir: Path) -> dict[str, Any]:
    """An experiment's manifest.json, or {} when missing or unreadable."""
    return _read_dict(edir / MANIFEST) or {}


def _read_dict(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def run_points(
    spec: ExperimentSpec,
    *,
    base_url: str,
    server_name: str,
    node: str,
    capture_root: Path,
    seeds: Iterable[int] | None = None,
    points: list[Point] | None = None,
    quiet: bool = True,
    telemetry: Telemetry | None = None,
    log: Callable[[str], None] | None = None,
) -> list[PointRecord | dict[str, Any]]:
    """Every point x seed in order; skips points already ok (resume), re-runs others as attempt N+1."""
    maker = load_prompt_maker(spec.tokenizer)
    seeds = list(spec.seeds if seeds is None else seeds)
    out: list[PointRecord | dict[str, Any]] = []
    for point in points if points is not None else spec.points():
        for seed in seeds:
            pname = point_name(point.sweep, seed)
            pdir = point_dir(Path(capture_root), node, spec.name, server_name, pname)
            old = read_point(pdir)
            if old and old.get("status") == "ok":
                if log:
                    log(f"{server_name} {pname}: already ok, skipped")
                try:
                    out.append(PointRecord(**old))
                except TypeError:  # written by another harness version: keep it as it is
                    out.append(old)
                continue
            attempt = next_attempt(pdir, old)
            rec = run_point(
                spec,
                point,
                seed,
                base_url=base_url,
                server_name=server_name,
                node=node,
                capture_root=capture_root,
                quiet=quiet,
                telemetry=telemetry,
                attempt=attempt,
                prompt_maker=maker,
            )
            if log:
                log(
                    f"{server_name} {pname}: {rec.status} ({rec.requests_ok} ok, {rec.requests_failed} failed)"
                )
            out.append(rec)
    return out


def git_sha() -> str | None:
    """The harness checkout's commit, for manifests (None outside a git checkout)."""
    try:
        r = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def write_manifest(
    spec: ExperimentSpec, capture_root: Path, node: str, extra: dict[str, Any] | None = None
) -> Path:
    """Create or merge manifest.json: ours is rewritten, keys others added (GPU, driver, server) are kept."""
    edir = experiment_dir(Path(capture_root), node, spec.name)
    manifest = load_manifest(edir)
    check_same_spec(spec, edir, manifest)
    now = time.time()
    manifest.update(
        {
            "experiment": spec.name,
            "spec_fingerprint": spec_fingerprint(spec),
            "spec_path": str(spec.source_path) if spec.source_path else None,
            "spec": spec.redacted_raw(),
            "harness_version": __version__,
            "git_sha": git_sha(),
            "host": socket.gethostname(),
            "node": node,
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        }
    )
    manifest.setdefault("start_wall", now)
    manifest.setdefault("start_time", time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)))
    manifest["last_run_wall"] = now
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(manifest.get(k), dict):
            manifest[k] = {**manifest[k], **v}
        else:
            manifest[k] = v
    path = edir / MANIFEST
    write_json_atomic(path, manifest)
    return path


# The fingerprint covers what makes points comparable (new seeds, sweep values, timeouts or servers are
# fine; a changed workload, model or concurrency is not). `harness run` and `harness bench` both check it.
FINGERPRINT_KEYS = ("api", "model", "tokenizer", "concurrency", "workload", "request_rate")


def fingerprint(obj: Any) -> str:
    """A short, stable hash of a JSON-able object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def spec_fingerprint(spec: ExperimentSpec) -> str:
    """A short hash of the spec settings that decide what a point measures."""
    return fingerprint({k: spec.raw.get(k) for k in FINGERPRINT_KEYS})


def check_same_spec(spec: ExperimentSpec, edir: Path, manifest: dict[str, Any]) -> None:
    """Refuse to resume into a capture whose points were measured under another version of the spec."""
    # both `run` and `bench` write the top-level key on every run; older bench manifests kept it under bench
    old = manifest.get("spec_fingerprint") or (manifest.get("bench") or {}).get("spec_fingerprint")
    if old in (None, spec_fingerprint(spec)) or not any(edir.glob(f"*/*/{POINT}")):
        return
    raise HarnessError(
        f"{edir}: holds points of a different version of {spec.source_path} (workload or client "
        "settings changed); use another --capture or --node, or remove that folder"
    )
