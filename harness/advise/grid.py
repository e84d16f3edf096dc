"""The exact what-if grid around the knee: which configurations to replay, and the replay itself.

Pools: the current one, the card x model default (memory fraction), twice the larger (FP8 KV), and
the one-pass curve's knee points (half, 3/4, 90% and all of the ceiling) where they lie between.
Host ratios: 2x and 4x the device pool where the host memory holds them (`--host-memory`; a pool only FP8
KV reaches has a host tier of half the bytes), and the whole share as `--hicache-size` where 4x overshoots it. Every policy replays device-only and with a write_through host tier; lru also
with every write policy. tlru at two thresholds from the input's prompt lengths. L3 (`storage_configs`):
lru behind the largest host tier, one per backend that loads a typical prompt faster than recomputing
it (harness.advise.breakeven), at the recommended pool. All through
`harness.whatif.replay.sweep` (SGLang 0.5.23's tree, `--mode exact`'s sibling: the server's own
whole-node eviction).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import numpy as np

from harness.advise.curve import StackDistances
from harness.advise.levers import HOST_RATIOS, Levers
from harness.advise.physics import Modelled
from harness.advise.replays import Replays, Work
from harness.advise.slo import Slo
from harness.sim.hicache import WRITE_POLICIES
from harness.sim.timing import CardProfile
from harness.whatif.grid import Config
from harness.whatif.replay import Result
from harness.whatif.result import conversation_rates
from harness.whatif.trace import Trace


def policy_config_tokens(c: Config, unit_tokens: int) -> dict[str, int]:
    """The policy's config in tokens: tlru's threshold and next_prompt_estimate are lengths (SGLang compares
    them with a node's prefix length in tokens), so a block trace's values scale by its block size; slru's
    protected_threshold is a hit count and stays."""
    scaled = ("threshold", "next_prompt_estimate")
    return {k: int(v) * (unit_tokens if k in scaled else 1) for k, v in c.policy_config}


def config_dict(c: Config, unit_tokens: int = 1) -> dict:
    """A configuration's knobs as the JSON names them (candidates and the recommendation share them); the
    policy config in tokens, as SGLang's --radix-eviction-policy-config takes it."""
    return {
        "policy": c.policy,
        "policy_config": policy_config_tokens(c, unit_tokens),
        "pool": c.pool,
        "host_ratio": c.host_ratio,
        "write_policy": c.write_policy if c.host_ratio > 0 else None,
        "storage_backend": c.storage or None,
    }


@dataclass(frozen=True)
class Candidate:
    config: Config
    result: Result
    modelled: Modelled
    unit_tokens: int = 1  # tokens per pool unit (a block trace's block size): the policy config in tokens

    @property
    def hit_rate(self) -> float:
        return self.result.hit_rate

    def label(self) -> str:
        c = self.config
        pc = policy_config_tokens(c, self.unit_tokens)
        pol = c.policy + (f"({','.join(f'{k}={v}' for k, v in pc.items())} tokens)" if pc else "")
        host = f", host {c.host_ratio:.3g}x {c.write_policy}" if c.host_ratio > 0 else ""
        storage = f", storage {c.storage}" if c.storage else ""
        return f"{pol}, pool {c.pool:,}{host}{storage}"

    def to_dict(self) -> dict:
        c = self.config
        return {
            **config_dict(c, self.unit_tokens),
            "predicted_hit_rate": round(self.hit_rate, 6),
            "device_hit_rate": round(self.result.device_hit_tokens / max(self.result.prompt_tokens, 1), 6),
            "host_hit_rate": round(self.result.host_hit_tokens / max(self.result.prompt_tokens, 1), 6),
            "storage_hit_rate": round(self.result.storage_hit_tokens / max(self.result.prompt_tokens, 1), 6),
            "per_conversation_hit_rate": conversation_rates(self.result.per_conversation),
            "modelled": self.modelled.to_dict(),
            "replay_seconds": round(self.result.seconds, 3),
        }


def tlru_configs(trace: Trace) -> list[tuple[tuple[str, int], ...]]:
    """Two T-LRU settings from the input's prompt lengths (units): threshold at the median and p90."""
    lengths = np.asarray([len(r.key) for r in trace.requests])
    out = []
    for q in (50, 90):
        t = max(int(np.percentile(lengths, q)), 2)
        out.append(tuple(sorted({"threshold": t, "next_prompt_estimate": t // 4}.items())))
    return sorted(set(out))


def pools_around(current: int, device: int, sd: StackDistances) -> list[int]:
    """The current pool, the card's default, twice the larger (FP8 KV), and the one-pass curve's knee:
    the smallest pools reaching half, 3/4, 90% and all of the ceiling, where they lie in that range."""
    grown = max(current, device)
    pools = {current, grown, 2 * grown}
    for share in (0.5, 0.75, 0.9):
        pools.add(sd.pool_for(sd.ceiling * share))
    pools.add(sd.knee_pool)
    return sorted(
        p for p in pools if 0 < p <= 2 * grown and (p in (current, grown, 2 * grown) or p >= current // 2)
    )


def host_ratios(
    pool_units: int,
    unit: int,
    profile: CardProfile,
    host_memory_gb: float | None,
    levers: Levers | None = None,
) -> list[float]:
    """The ratios whose host pool fits the host memory (SGLang sizes it as ratio x device pool, in the
    device pool's KV dtype: `levers` says which pools are FP8). Where a ratio overshoots the share and the
    share still holds over 1.1x the largest ratio that fits (or over 1x with none), the share itself
    (`--hicache-size`, whole 0.1 GB) as a ratio of its own (harness.advise.levers.size_ratio)."""
    if host_memory_gb is None:
        return list(HOST_RATIOS)
    per_token = levers.kv_bytes(pool_units) if levers is not None else profile.kv_bytes_per_token
    pool_bytes = max(pool_units * unit * per_token, 1)
    cap = host_memory_gb * 1e9 / pool_bytes
    fits = [r for r in HOST_RATIOS if r <= cap]
    if len(fits) < len(HOST_RATIOS):
        gb = int(host_memory_gb * 10) / 10  # --hicache-size in whole 0.1 GB, within the share
        ratio = gb * 1e9 / pool_bytes
        if ratio > 1.1 * max(fits, default=0.91):  # SGLang wants a host pool larger than the device's
            fits.append(ratio)
    return fits


def build(
    trace: Trace,
    pools: list[int],
    profile: CardProfile,
    host_memory_gb: float | None,
    priorities: bool,
    levers: Levers | None = None,
) -> list[Config]:
    policies: list[tuple[str, tuple]] = [("lru", ()), ("lfu", ()), ("slru", ())]
    if priorities:
        policies.append(("priority", ()))
    policies += [("tlru", pc) for pc in tlru_configs(trace)]
    out: list[Config] = []
    for pol, pc in policies:
        for pool in pools:
            out.append(Config(pol, pool, policy_config=pc))
            for ratio in host_ratios(pool, trace.unit, profile, host_memory_gb, levers):
                for w in WRITE_POLICIES if pol == "lru" else ("write_through",):
                    out.append(Config(pol, pool, ratio, w, policy_config=pc))
    return out


def storage_configs(
    trace: Trace,
    pool: int,
    profile: CardProfile,
    host_memory_gb: float | None,
    backends: tuple[str, ...],
    levers: Levers | None = None,
) -> list[Config]:
    """L3 behind the largest host tier that fits at `pool` (lru, write_through: SGLang writes to L3 what
    the host tier backed up), one per backend. An L3 replay runs the whole engine (~20x a tree replay), so
    advise tries them at the recommended pool only."""
    ratios = host_ratios(pool, trace.unit, profile, host_memory_gb, levers)
    if not ratios:
        return []
    return [Config("lru", pool, max(ratios), "write_through", storage=b) for b in backends]


def run(
    trace: Trace,
    configs: list[Config],
    profile: CardProfile,
    slo: Slo | None,
    workers: int | None = None,
    pool: Replays | None = None,
    kind: str = "grid",
) -> list[Candidate]:
    """Every configuration replayed and modelled, on `pool` (whose Work must be this trace's) or a pool
    of its own."""
    if pool is None:
        with Replays(Work(trace, profile, slo), min(workers or os.cpu_count() or 1, len(configs))) as own:
            return run(trace, configs, profile, slo, pool=own, kind=kind)
    return candidates(trace, configs, pool.gather([pool.submit(kind, c) for c in configs]))


def candidates(trace: Trace, configs: list[Config], got: list[tuple[Result, Modelled]]) -> list[Candidate]:
    return [Candidate(c, r, m, trace.unit) for c, (r, m) in zip(configs, got, strict=True)]


def run_storage(
    trace: Trace,
    configs: list[Config],
    profile: CardProfile,
    slo: Slo | None,
    workers: int | None = None,
    pool: Replays | None = None,
) -> list[Candidate]:
    """The L3 configurations (one per backend, all else equal) in as few engine replays as can be proven
    enough: the largest stores first, a round across the pool at a time. A backend whose twin's replay
    never took a prefetch past the threshold, on a store no larger than the twin's proof covers
    (Result.backend_free_pages), would replay the very same: it gets the twin's result and model under its
    own config and tier seconds (replay seconds 0: none ran). The first round is the largest store alone:
    when its proof holds, every other backend is a copy (one engine replay, not one per worker), and the
    pool's other workers run the jobs queued beside it meanwhile (advise's rows at load)."""
    from harness.sim.storage_tier import capacity_pages
    from harness.whatif.serve import engine_config, tier_seconds

    if pool is None:
        n = max(1, min(workers or os.cpu_count() or 1, len(configs)))
        with Replays(Work(trace, profile, slo), n) as own:
            return run_storage(trace, configs, profile, slo, pool=own)
    n = pool.workers
    cap = {c: capacity_pages(engine_config(c, profile, trace)) for c in configs}
    got: dict[Config, Candidate] = {}
    todo = sorted(configs, key=lambda c: -cap[c])
    width = 1  # the first round proves what it can; the rounds after it take a replay per worker
    while todo:
        batch, todo = todo[:width], todo[width:]
        width = n
        got.update(zip(batch, run(trace, batch, profile, slo, pool=pool, kind="storage"), strict=True))
        rest = []
        for c in todo:
            twin = next((x for x in got.values() if _twin(x, c, cap[c])), None)
            if twin is None:
                rest.append(c)
                continue
            res = dataclasses.replace(twin.result, config=c, seconds=0.0)
            res.tier_seconds = tier_seconds(res, engine_config(c, profile, trace))
            got[c] = Candidate(c, res, twin.modelled, trace.unit)
        todo = rest
    return [got[c] for c in configs]


def _twin(x: Candidate, c: Config, capacity: int) -> bool:
    """x's replay is c's: the same configuration but the backend, and no choice in it turned on one."""
    free = x.result.backend_free_pages
    return free is not None and capacity <= free and dataclasses.replace(x.config, storage=c.storage) == c
