"""Predicted vs measured for a point of a `replicas:` profile: the routing replay of exactly what was sent.

The capture point is rebuilt as a trace (harness.whatif.captured: the prompts sent, the answers given,
in send order), replayed on the workers' own engine settings (their server_info) behind the profile's
policy, and set beside what each worker served: which requests (the gateway's x-smg-routed-worker-id
header in each record) and its hit rate by usage. smg's worker order is its registry's, not the
harness's w<i>, and the workers start identical, so each replayed worker is paired with the live worker
that served most of the same requests.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.whatif.fleet import FleetResult, replay_fleet
from harness.whatif.grid import Config
from harness.whatif.routing import RouterConfig


@dataclass
class WorkerCheck:
    worker: str  # the harness's name of the live worker (w<i>)
    measured_requests: int
    predicted_requests: int
    measured_hit_rate: float
    predicted_hit_rate: float
    same_requests: int  # requests both put on this worker

    @property
    def diff_points(self) -> float:
        return 100.0 * (self.predicted_hit_rate - self.measured_hit_rate)


@dataclass
class RoutingCheck:
    policy: str
    replicas: int
    measured_hit_rate: float
    predicted_hit_rate: float
    workers: list[WorkerCheck] = field(default_factory=list)
    same_routing: bool = False  # every request on the same worker (up to the workers' names)
    replay: FleetResult | None = field(default=None, repr=False)

    @property
    def diff_points(self) -> float:
        return 100.0 * (self.predicted_hit_rate - self.measured_hit_rate)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "replicas": self.replicas,
            "measured_hit_rate": self.measured_hit_rate,
            "predicted_hit_rate": self.predicted_hit_rate,
            "diff_points": round(self.diff_points, 3),
            "same_routing": self.same_routing,
            "workers": [{**w.__dict__, "diff_points": round(w.diff_points, 3)} for w in self.workers],
        }


def _router_config(server_dir: Path, seed: int) -> RouterConfig:
    """The profile's policy and smg flags, from replicas.json's gateway line."""
    try:
        info = json.loads((server_dir / "replicas.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise HarnessError(f"{server_dir}: not a replicas server folder (replicas.json: {e})") from None
    argv = [str(a) for a in info.get("router_argv") or []]
    flags = {a[2:].replace("-", "_"): b for a, b in itertools.pairwise([*argv, ""]) if a.startswith("--")}
    kw: dict[str, Any] = {
        "policy": str(info.get("policy") or flags.get("policy") or "cache_aware"),
        "seed": seed,
    }
    for name, conv in (
        ("cache_threshold", float),
        ("balance_abs_threshold", int),
        ("balance_rel_threshold", float),
        ("max_tree_size", int),
        ("prefix_token_count", int),
        ("prefix_hash_load_factor", float),
    ):
        if name in flags and not flags[name].startswith("--"):
            kw[name] = conv(flags[name])
    if "eviction_interval" in flags and not flags["eviction_interval"].startswith("--"):
        kw["eviction_interval_s"] = float(flags["eviction_interval"])
    return RouterConfig(**kw)


def _worker_info(server_dir: Path) -> dict[str, Any] | None:
    for p in (server_dir / "workers" / "w0" / "server_info.json", server_dir / "server_info.json"):
        try:
            return dict(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return None


def check_point(point_dir: Path, seed: int = 0, shared_l3: bool | None = None) -> RoutingCheck:
    """Replay a replicas point's requests behind its policy and pair each worker with its live one."""
    from harness.capture import REQUESTS, read_jsonl
    from harness.summarize.prediction import engine_from_info
    from harness.whatif.captured import read_capture

    server_dir = point_dir.parent
    info = _worker_info(server_dir)
    econf = engine_from_info(info)
    if isinstance(econf, str):
        raise HarnessError(f"{point_dir}: {econf}")
    rcfg = _router_config(server_dir, seed)
    point = json.loads((point_dir / "point.json").read_text(encoding="utf-8"))
    names = {url: name for name, url in (point.get("workers") or {}).items()}
    if not names:
        raise HarnessError(f"{point_dir}: point.json names no workers (not a replicas point)")
    trace = read_capture(point_dir, info)
    records, _ = read_jsonl(point_dir / REQUESTS)
    live = {
        r["index"]: r
        for r in records
        if r.get("sent_mono") is not None and not r.get("warmup") and r.get("worker") in names
    }
    if shared_l3 is None:
        reps = json.loads((server_dir / "replicas.json").read_text(encoding="utf-8"))
        shared_l3 = reps.get("storage") == "shared"
    cfg = Config(econf.policy, econf.pool_tokens, page_size=econf.page_size)
    res = replay_fleet(trace, cfg, len(names), rcfg, shared_l3=shared_l3, econf=econf)
    return _pair(rcfg, res, trace.requests, live, names)


def _pair(
    rcfg: RouterConfig, res: FleetResult, requests: list, live: dict[int, dict], names: dict[str, str]
) -> RoutingCheck:
    """Each replayed worker against the live worker that served most of its requests (a matching)."""
    n = res.replicas
    urls = sorted(names, key=lambda u: names[u])
    overlap = [[0] * n for _ in urls]
    for r, w in zip(requests, res.worker_of, strict=True):
        rec = live.get(r.index)
        if rec is not None:
            overlap[urls.index(rec["worker"])][w] += 1
    best = max(
        itertools.permutations(range(n)), key=lambda p: sum(overlap[i][p[i]] for i in range(len(urls)))
    )
    measured: dict[str, list[int]] = {u: [0, 0, 0] for u in urls}  # requests, prompt, cached
    for rec in live.values():
        m = measured[rec["worker"]]
        m[0] += 1
        m[1] += int(rec.get("prompt_tokens") or 0)
        m[2] += int(rec.get("cached_tokens") or 0)
    workers = []
    for i, u in enumerate(urls):
        f = res.workers[best[i]]
        req, prompt, cached = measured[u]
        workers.append(
            WorkerCheck(
                names[u], req, f.requests, cached / prompt if prompt else 0.0, f.hit_rate, overlap[i][best[i]]
            )
        )
    total_p = sum(m[1] for m in measured.values())
    total_c = sum(m[2] for m in measured.values())
    same = sum(w.same_requests for w in workers) == len(live) == len(requests)
    return RoutingCheck(
        rcfg.policy, n, total_c / total_p if total_p else 0.0, res.aggregate.hit_rate, workers, same, res
    )
