"""Reading a capture leniently: experiment, server and point x seed folders as typed objects.

Reads only the capture contract (docs/architecture.md): manifest, server log and info, and per point
requests.jsonl, telemetry.jsonl, metrics-before/after.prom and point.json. A missing or broken file
is listed under `problems` with its path and skipped; it never stops the summary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import capture, metrics, serverlog
from harness.capture.points import measured
from harness.engines import logs
from harness.errors import HarnessError

WORKER_LABEL = "harness_worker"  # the label the summed scrape gives each worker's series


@dataclass
class SeedCapture:
    """Everything one point x seed folder holds, read leniently."""

    path: Path
    server: str
    seed: int
    sweep: dict[str, Any]
    point: dict[str, Any] | None
    requests: list[dict[str, Any]]
    telemetry: list[dict[str, Any]] | None
    before: metrics.Scrape | None
    after: metrics.Scrape | None
    log: serverlog.ParsedLog | None = None  # the server log of the folder this point came from
    # a replicas profile: each worker's scrapes before and after (before/after above: their union, each
    # series labelled with its worker) and the gateway's
    worker_scrapes: dict[str, tuple[metrics.Scrape | None, metrics.Scrape | None]] = field(
        default_factory=dict
    )
    router_scrapes: tuple[metrics.Scrape | None, metrics.Scrape | None] = (None, None)

    @property
    def status(self) -> str:
        return str(self.point.get("status", "missing")) if self.point else "missing"


@dataclass
class WorkerCapture:
    """One replica of a replicas profile: its folder, server_info and log."""

    name: str
    path: Path
    info: dict[str, Any] | None
    log: serverlog.ParsedLog | None


@dataclass
class ServerCapture:
    name: str
    path: Path
    info: dict[str, Any] | None  # a replicas profile: its first worker's (every worker is launched alike)
    log: serverlog.ParsedLog | None  # a replicas profile: its first worker's
    seeds: dict[str, SeedCapture] = field(default_factory=dict)  # point folder name -> capture
    replicas: dict[str, Any] | None = None  # replicas.json (harness.servers.replicas), None for one server
    workers: dict[str, WorkerCapture] = field(default_factory=dict)


@dataclass
class ExperimentCapture:
    node: str
    name: str
    path: Path
    manifest: dict[str, Any]
    servers: dict[str, ServerCapture] = field(default_factory=dict)


class Problems(list):
    """Files that were missing or unreadable: `{path, reason}` each, reported, then skipped."""

    def add(self, path: Path | str, reason: str) -> None:
        self.append({"path": str(path), "reason": reason})


# ---------------------------------------------------------------- reading the capture


def _read_json(path: Path, problems: Problems) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        problems.add(path, f"unreadable JSON ({type(e).__name__}: {e}); skipped")
        return None


def _read_prom(path: Path, problems: Problems) -> metrics.Scrape | None:
    if not path.exists():
        return None
    try:
        scrape = metrics.parse_prometheus(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as e:
        problems.add(path, f"unreadable ({e}); skipped")
        return None
    if scrape.bad_lines:
        problems.add(path, f"{scrape.bad_lines} unreadable lines skipped")
    return scrape


def _sweep_from_name(name: str) -> tuple[dict[str, Any], int | None]:
    """`groups=16,seed=0` → ({"groups": 16}, 0): the fallback when point.json is missing."""
    sweep: dict[str, Any] = {}
    seed = None
    for part in name.split(","):
        if "=" not in part:
            continue
        k, v = part.split("=", 1)
        val: Any = v
        for cast in (int, float):
            try:
                val = cast(v)
                break
            except ValueError:
                pass
        if k == "seed" and isinstance(val, int):
            seed = val
        else:
            sweep[k] = val
    return sweep, seed


def _read_seed(path: Path, server: str, problems: Problems) -> SeedCapture | None:
    point = _read_json(path / capture.POINT, problems)
    if point is not None and not isinstance(point, dict):
        problems.add(path / capture.POINT, "not a JSON object; skipped")
        point = None
    if point is None and (path / capture.POINT).exists() is False:
        problems.add(path / capture.POINT, "missing (point never finished); shown with status missing")
    requests: list[dict[str, Any]] = []
    req_path = path / capture.REQUESTS
    if req_path.exists():
        rows, bad = capture.read_jsonl(req_path)
        requests = measured(rows)  # warm-up and never-sent rows are counted in point.json, never measured
        if bad:
            problems.add(req_path, f"{bad} unreadable lines skipped (truncated write?)")
    else:
        problems.add(req_path, "missing; point has no requests")
    telemetry = None
    tel_path = path / capture.TELEMETRY
    if tel_path.exists():
        telemetry, bad = capture.read_jsonl(tel_path)
        if bad:
            problems.add(tel_path, f"{bad} unreadable lines skipped")
    name_sweep, name_seed = _sweep_from_name(path.name)
    sweep = point.get("sweep") if point and isinstance(point.get("sweep"), dict) else name_sweep
    seed = point.get("seed") if point and isinstance(point.get("seed"), int) else name_seed
    if seed is None:
        seed = next((r["seed"] for r in requests if isinstance(r.get("seed"), int)), None)
    if seed is None:
        problems.add(path, "no seed in point.json, folder name or requests; skipped")
        return None
    return SeedCapture(
        path=path,
        server=server,
        seed=int(seed),
        sweep=dict(sweep),
        point=point,
        requests=requests,
        telemetry=telemetry,
        before=_read_prom(path / capture.METRICS_BEFORE, problems),
        after=_read_prom(path / capture.METRICS_AFTER, problems),
    )


def _is_point_dir(p: Path) -> bool:
    return p.is_dir() and any((p / n).exists() for n in (capture.POINT, capture.REQUESTS))


def _read_log(path: Path, problems: Problems) -> serverlog.ParsedLog | None:
    log_path = path / capture.SERVER_LOG
    if not log_path.exists():
        problems.add(log_path, "missing; no log evidence for this server")
        return None
    try:
        return logs.parse_file(log_path)
    except OSError as e:
        problems.add(log_path, f"unreadable ({e}); skipped")
        return None


def _read_server(path: Path, problems: Problems) -> ServerCapture:
    replicas = _read_json(path / capture.REPLICAS, problems)
    if isinstance(replicas, dict):
        workers = {}
        for wdir in sorted((path / capture.WORKERS_DIR).glob("w*"), key=lambda p: (len(p.name), p.name)):
            winfo = _read_json(wdir / capture.SERVER_INFO, problems)
            winfo = winfo if isinstance(winfo, dict) else None
            workers[wdir.name] = WorkerCapture(wdir.name, wdir, winfo, _read_log(wdir, problems))
        first = next(iter(workers.values()), None)
        srv = ServerCapture(
            path.name, path, first.info if first else None, first.log if first else None, replicas=replicas
        )
        srv.workers = workers
    else:
        info = _read_json(path / capture.SERVER_INFO, problems)
        srv = ServerCapture(
            path.name, path, info if isinstance(info, dict) else None, _read_log(path, problems)
        )
    for sub in sorted(path.iterdir()):
        if _is_point_dir(sub):
            sc = _read_seed(sub, path.name, problems)
            if sc is not None:
                sc.log = srv.log
                if srv.workers:
                    _read_worker_scrapes(sc, list(srv.workers), problems)
                srv.seeds[sub.name] = sc
    return srv


def _read_worker_scrapes(sc: SeedCapture, names: list[str], problems: Problems) -> None:
    """Each worker's scrapes of the point, and their union as the point's own (series labelled by worker,
    so Scrape.get sums them): the counter hit rate of the replicas is the sum over the workers."""
    for name in names:
        d = sc.path / capture.WORKERS_DIR / name
        sc.worker_scrapes[name] = (
            _read_prom(d / capture.METRICS_BEFORE, problems),
            _read_prom(d / capture.METRICS_AFTER, problems),
        )
    sc.router_scrapes = (
        _read_prom(sc.path / capture.ROUTER_METRICS_BEFORE, problems),
        _read_prom(sc.path / capture.ROUTER_METRICS_AFTER, problems),
    )
    for i, attr in enumerate(("before", "after")):
        parts = [(n, pair[i]) for n, pair in sc.worker_scrapes.items()]
        if any(s is None for _, s in parts):
            setattr(sc, attr, None)  # a worker's scrape is missing: no sum to take
            continue
        merged = metrics.Scrape()
        for n, scrape in parts:
            assert scrape is not None
            merged.types.update(scrape.types)
            for (metric, labels), v in scrape.values.items():
                merged.values[(metric, (*labels, (WORKER_LABEL, n)))] = v
        setattr(sc, attr, merged)


def _find_manifests(root: Path) -> list[Path]:
    if (root / capture.MANIFEST).exists():
        return [root]
    found = sorted({m.parent for m in root.glob("*/" + capture.MANIFEST)})
    found += sorted({m.parent for m in root.glob("*/*/" + capture.MANIFEST)})
    return sorted(set(found))


def read_captures(dirs: Sequence[Path | str], problems: Problems) -> list[ExperimentCapture]:
    """Every experiment folder (one with manifest.json) under the given capture folders."""
    out: dict[tuple[str, str], ExperimentCapture] = {}
    for d in map(Path, dirs):
        if not d.is_dir():
            raise HarnessError(f"{d}: capture folder not found")
        exp_dirs = _find_manifests(d)
        if not exp_dirs:
            problems.add(d, "no manifest.json found at depth 0-2; nothing summarized from it")
        for exp_dir in exp_dirs:
            manifest = _read_json(exp_dir / capture.MANIFEST, problems)
            manifest = manifest if isinstance(manifest, dict) else {}
            node = str(manifest.get("node") or exp_dir.parent.name)
            name = str(manifest.get("experiment") or exp_dir.name)
            exp = out.setdefault((node, name), ExperimentCapture(node, name, exp_dir, manifest))
            for sub in sorted(exp_dir.iterdir()):
                if not sub.is_dir() or not (
                    (sub / capture.SERVER_LOG).exists() or any(_is_point_dir(p) for p in sub.iterdir())
                ):
                    continue
                srv = _read_server(sub, problems)
                prev = exp.servers.get(srv.name)
                if prev is None:
                    exp.servers[srv.name] = srv
                    continue
                for pname, sc in srv.seeds.items():  # the same server in two capture folders: merge points
                    old = prev.seeds.get(pname)
                    if old is not None:
                        problems.add(sc.path, f"same point also in {old.path}; kept the ok or first one")
                    if old is None or (old.status != "ok" and sc.status == "ok"):
                        prev.seeds[pname] = sc
    return list(out.values())
