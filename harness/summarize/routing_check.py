"""Predicted vs measured for a point of a `replicas:` profile: the routing replay of exactly what was sent.

The capture point is rebuilt as a trace (harness.whatif.captured: the prompts sent, the answers given,
in send order) and replayed on the workers' own engine settings (their server_info) twice over:
- routed as the gateway routed it (each record's x-smg-routed-worker-id header): every worker's cache
  against its measured hit rate, and every live choice checked against the policy's model (a choice the
  model could not have made is `off_model`);
- routed by the model, one replay per seed: smg breaks ties, draws and places its ring at random, so a
  live run is one draw from that spread.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.whatif.fleet import FleetResult, replay_fleet
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace
from harness.whatif.routing import RouterConfig


@dataclass
class WorkerCheck:
    worker: str  # the harness's name of the live worker (w<i>)
    requests: int
    measured_hit_rate: float
    predicted_hit_rate: float  # the replay routed as the gateway routed

    @property
    def diff_points(self) -> float:
        return 100.0 * (self.predicted_hit_rate - self.measured_hit_rate)


@dataclass
class RoutingCheck:
    """A replicas point against its replays: routed as live (each worker's cache), and drawn (the policy)."""

    policy: str
    replicas: int
    measured_hit_rate: float
    followed_hit_rate: float  # the replay routed where the gateway routed each request
    workers: list[WorkerCheck]
    off_model: int  # live choices the policy's model could not have made
    predicted: list[float] = field(default_factory=list)  # drawn replays' hit rates, one per seed
    measured_skew: float = 1.0
    predicted_skew: list[float] = field(default_factory=list)
    follow: FleetResult | None = field(default=None, repr=False)

    @property
    def diff_points(self) -> float:
        """Drawn prediction (the mean over seeds) minus measured, points."""
        return 100.0 * (self.predicted_mean - self.measured_hit_rate)

    @property
    def predicted_mean(self) -> float:
        return sum(self.predicted) / len(self.predicted) if self.predicted else self.followed_hit_rate

    @property
    def predicted_sd(self) -> float:
        import statistics

        return statistics.pstdev(self.predicted) if len(self.predicted) > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "replicas": self.replicas,
            "measured_hit_rate": self.measured_hit_rate,
            "followed_hit_rate": self.followed_hit_rate,
            "predicted_mean": self.predicted_mean,
            "predicted_sd": self.predicted_sd,
            "predicted_min": min(self.predicted, default=self.followed_hit_rate),
            "predicted_max": max(self.predicted, default=self.followed_hit_rate),
            "diff_points": round(self.diff_points, 3),
            "off_model": self.off_model,
            "measured_skew": self.measured_skew,
            "predicted_skew_mean": sum(self.predicted_skew) / len(self.predicted_skew)
            if self.predicted_skew
            else None,
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
    for name in ("eviction_interval", "eviction_interval_secs"):
        if name in flags and not flags[name].startswith("--"):
            kw["eviction_interval_s"] = float(flags[name])
    return RouterConfig(**kw)


def _worker_info(server_dir: Path) -> dict[str, Any] | None:
    for p in (server_dir / "workers" / "w0" / "server_info.json", server_dir / "server_info.json"):
        try:
            return dict(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return None


def check_point(point_dir: Path, seeds: int = 20, shared_l3: bool | None = None) -> RoutingCheck:
    """Replay a replicas point's requests as the gateway routed them (each worker's cache against its
    counters) and as the policy draws them over `seeds` seeds (the spread a live run falls in)."""
    from harness.capture import REQUESTS, read_jsonl
    from harness.summarize.prediction import engine_from_info
    from harness.whatif.captured import read_capture

    server_dir = point_dir.parent
    info = _worker_info(server_dir)
    econf = engine_from_info(info)
    if isinstance(econf, str):
        raise HarnessError(f"{point_dir}: {econf}")
    rcfg = _router_config(server_dir, 0)
    point = json.loads((point_dir / "point.json").read_text(encoding="utf-8"))
    names = {url: name for name, url in (point.get("workers") or {}).items()}
    if not names:
        raise HarnessError(f"{point_dir}: point.json names no workers (not a replicas point)")
    urls = sorted(names, key=lambda u: names[u])
    trace = read_capture(point_dir, info)
    records, _ = read_jsonl(point_dir / REQUESTS)
    live = {r["index"]: r for r in records if r.get("sent_mono") is not None and not r.get("warmup")}
    missing = [r.index for r in trace.requests if live.get(r.index, {}).get("worker") not in names]
    if missing:
        raise HarnessError(
            f"{point_dir}: requests {missing[:5]} name no worker of the point (no routed-worker header)"
        )
    if shared_l3 is None:
        reps = json.loads((server_dir / "replicas.json").read_text(encoding="utf-8"))
        shared_l3 = reps.get("storage") == "shared"
    cfg = Config(econf.policy, econf.pool_tokens, page_size=econf.page_size)
    n = len(urls)
    chosen = [urls.index(live[r.index]["worker"]) for r in trace.requests]
    follow = _follow(trace, cfg, n, rcfg, shared_l3, econf, chosen)
    measured: list[list[int]] = [[0, 0, 0] for _ in urls]  # requests, prompt, cached
    for r, w in zip(trace.requests, chosen, strict=True):
        rec = live[r.index]
        measured[w][0] += 1
        measured[w][1] += int(rec.get("prompt_tokens") or 0)
        measured[w][2] += int(rec.get("cached_tokens") or 0)
    workers = [
        WorkerCheck(names[u], m[0], m[2] / m[1] if m[1] else 0.0, follow.workers[i].hit_rate)
        for i, (u, m) in enumerate(zip(urls, measured, strict=True))
    ]
    total_p = sum(m[1] for m in measured)
    prefill = [m[1] - m[2] for m in measured]
    mean_prefill = sum(prefill) / n
    drawn = [
        replay_fleet(trace, cfg, n, dataclasses.replace(rcfg, seed=s), shared_l3=shared_l3, econf=econf)
        for s in range(seeds)
    ]
    return RoutingCheck(
        rcfg.policy,
        n,
        sum(m[2] for m in measured) / total_p if total_p else 0.0,
        follow.aggregate.hit_rate,
        workers,
        len(follow.off_model),
        [d.aggregate.hit_rate for d in drawn],
        max(prefill) / mean_prefill if mean_prefill else 1.0,
        [d.load_skew for d in drawn],
        follow,
    )


def _follow(
    trace: Trace, cfg: Config, n: int, rcfg: RouterConfig, shared_l3: bool, econf: Any, chosen: list[int]
) -> FleetResult:
    """The replay routed as live, under the naming of smg's workers that leaves the fewest choices the
    model could not have made (smg orders its workers its own way; they are alike, so only the
    order-bound policies, round robin, notice; up to 5 workers are tried every way)."""
    best: FleetResult | None = None
    for perm in itertools.permutations(range(n)) if n <= 5 else [tuple(range(n))]:
        res = replay_fleet(
            trace, cfg, n, rcfg, shared_l3=shared_l3, econf=econf, follow=[perm[w] for w in chosen]
        )
        if best is None or len(res.off_model) < len(best.off_model):
            best, best_perm = res, perm
        if not res.off_model:
            break
    assert best is not None
    inverse = {v: k for k, v in enumerate(best_perm)}
    best.workers = [best.workers[best_perm[i]] for i in range(n)]  # back to the harness's names
    best.worker_of = [inverse[w] for w in best.worker_of]
    return best
