"""The recommendation, in the order serving engineers change things: prompts prefix-stable -> a bigger pool
-> a host tier with write_through -> write_through_selective -> storage -> eviction policy last.

A step is taken only when the exact replay says it pays (MIN_GAIN of hit rate and no higher modelled TTFT
mean); "no change pays" is a valid answer. Each step carries the numbers it rests on and the lever that
reaches it (harness.advise.levers). After the steps, a better candidate the steps did not reach is named
with its costs (harness.advise.better).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.advise.better import MIN_GAIN, Better, better_candidate, changed, cost
from harness.advise.grid import Candidate, config_dict
from harness.advise.levers import Levers
from harness.advise.working_set import WorkingSet

UNSTABLE_SHARE = 0.10


@dataclass(frozen=True)
class Step:
    action: str
    why: str
    before: Candidate | None = None
    after: Candidate | None = None

    def to_dict(self) -> dict:
        d: dict = {"action": self.action, "why": self.why}
        for name, c in (("before", self.before), ("after", self.after)):
            if c is not None:
                d[name] = {
                    "config": c.label(),
                    "hit_rate": round(c.hit_rate, 6),
                    "ttft_ms": {k: round(v, 3) for k, v in c.modelled.ttft_ms.items()},
                    "goodput_rps": c.modelled.goodput_rps,
                }
        return d


@dataclass
class Recommendation:
    hicache: bool
    headline: str
    chosen: Candidate
    baseline: Candidate
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    better: Better | None = None  # the best candidate, when it beats `chosen` by MIN_GAIN or more

    def to_dict(self) -> dict:
        c = self.chosen.config
        return {
            "hicache": self.hicache,
            "headline": self.headline,
            **config_dict(c, self.chosen.unit_tokens),
            "steps": [s.to_dict() for s in self.steps],
            "notes": self.notes,
            "better_candidate": None if self.better is None else self.better.to_dict(),
        }


def _pays(a: Candidate, b: Candidate) -> bool:
    """b is worth changing to from a: more hits and no slower first token on average."""
    return b.hit_rate - a.hit_rate >= MIN_GAIN and b.modelled.ttft_ms["mean"] <= a.modelled.ttft_ms["mean"]


def _best(cands: list[Candidate]) -> Candidate:
    """Highest hit rate; ties go to the cheaper configuration (smaller pool, less host, lru)."""
    return max(
        cands,
        key=lambda c: (
            round(c.hit_rate, 4),
            -c.config.pool,
            -c.config.host_ratio,
            not c.config.storage,
            c.config.policy == "lru",
            c.config.write_policy == "write_through",
        ),
    )


def _pct(x: float) -> str:
    return f"{x:.1%}"


def recommend(
    cands: list[Candidate],
    current_pool: int,
    ws: WorkingSet,
    unit_name: str,
    no_host: str = "no host ratio fits the host memory",
    slow_storage: tuple[str, ...] = (),
    typical_tokens: int = 0,
    levers: Levers | None = None,
    host_memory_gb: float | None = None,
) -> Recommendation:
    def pick(policy: str | None = "lru", pool: int | None = None, host: bool | None = None, write=None):
        return [
            c
            for c in cands
            if not c.config.storage
            and (policy is None or (c.config.policy == policy))
            and (pool is None or c.config.pool == pool)
            and (host is None or (c.config.host_ratio > 0) == host)
            and (write is None or c.config.host_ratio == 0 or c.config.write_policy == write)
        ]

    baseline = pick("lru", current_pool, False)[0]
    steps: list[Step] = []
    notes: list[str] = []
    if ws.unstable_share >= UNSTABLE_SHARE:
        steps.append(
            Step(
                "make prompts prefix-stable",
                f"{ws.unstable_turns} of {ws.later_turns} later turns ({_pct(ws.unstable_share)}) do not extend "
                "the previous turn's prompt and answer, so their history is recomputed whatever the pool",
            )
        )
    # grow the pool (lru, no host)
    here = baseline
    grown = _best(pick("lru", None, False))
    lever = levers.pool_lever(grown.config.pool) if levers is not None else None
    if grown.config.pool != here.config.pool and _pays(here, grown) and (levers is None or lever is not None):
        size = levers.size(grown.config.pool) if levers is not None else f"{grown.config.pool:,} {unit_name}"
        steps.append(
            Step(
                f"grow the device pool to {size}: "
                + (lever.text if lever is not None else "memory fraction, or FP8 KV past the card's default"),
                f"hits come back from further than the pool holds: 90% of the hit tokens need "
                f"{ws.reuse_distance.get('p90', 0):,} {unit_name}, the pool is {here.config.pool:,}",
                here,
                grown,
            )
        )
        here = grown
    pool = here.config.pool
    # host tier, write_through
    hosted = pick("lru", pool, True, "write_through")
    hicache = False
    w5 = ws.within.get("5m", 0)
    if hosted:
        best_host = _best(hosted)
        gain = best_host.hit_rate - here.hit_rate
        if _pays(here, best_host):
            hicache = True
            headline = (
                f"HiCache pays: hit rate {_pct(here.hit_rate)} -> {_pct(best_host.hit_rate)}, modelled TTFT mean "
                f"{here.modelled.ttft_ms['mean']:.0f} -> {best_host.modelled.ttft_ms['mean']:.0f} ms"
            )
            steps.append(
                Step(
                    f"enable HiCache: host tier {best_host.config.host_ratio:.3g}x, write_through"
                    + (
                        f" ({levers.host_lever(pool, best_host.config.host_ratio, host_memory_gb)})"
                        if levers is not None
                        else ""
                    ),
                    f"the 5-minute working set ({w5:,} {unit_name}) exceeds the device pool ({pool:,})",
                    here,
                    best_host,
                )
            )
            here = best_host
            sel = pick("lru", pool, True, "write_through_selective")
            sel = [c for c in sel if c.config.host_ratio == here.config.host_ratio]
            if sel and here.hit_rate - sel[0].hit_rate < MIN_GAIN / 2:
                steps.append(
                    Step(
                        "if host copies cost too much bandwidth: write_through_selective",
                        f"it keeps {_pct(sel[0].hit_rate)} of hits (write_through {_pct(here.hit_rate)}) while "
                        "backing up only nodes hit again",
                        here,
                        sel[0],
                    )
                )
        else:
            headline = (
                f"HiCache adds nothing: a host tier moves the hit rate by {gain * 100:+.2f} points "
                f"({_pct(here.hit_rate)} -> {_pct(best_host.hit_rate)}); the 5-minute working set "
                f"({w5:,} {unit_name}) "
                + ("fits the device pool" if w5 <= pool else "does not come back often enough")
                + f" ({pool:,} {unit_name})"
            )
    else:
        headline = f"HiCache not evaluated: {no_host}"
    before_l3 = here
    here = _storage_step(cands, here, steps, notes, slow_storage, typical_tokens)
    if here is not before_l3 and not hicache:  # the host tier alone did not pay, with L3 behind it it does
        hicache = True
        headline = (
            f"HiCache pays with a storage tier: hit rate {_pct(before_l3.hit_rate)} -> {_pct(here.hit_rate)}, "
            f"modelled TTFT mean {before_l3.modelled.ttft_ms['mean']:.0f} -> {here.modelled.ttft_ms['mean']:.0f} ms"
        )
    # eviction policy last
    same = [
        c
        for c in cands
        if c.config.pool == here.config.pool
        and c.config.host_ratio == here.config.host_ratio
        and c.config.storage == here.config.storage
        and (c.config.host_ratio == 0 or c.config.write_policy == here.config.write_policy)
    ]
    best_pol = _best(same)
    if best_pol.config.policy != here.config.policy and _pays(here, best_pol):
        steps.append(
            Step(
                f"eviction policy {best_pol.config.policy}",
                f"measured against lru at the same pool: {_pct(here.hit_rate)} -> {_pct(best_pol.hit_rate)}",
                here,
                best_pol,
            )
        )
        here = best_pol
    better = better_candidate(cands, here, levers, host_memory_gb)
    together = _together(here, better, levers) if not any(s.before for s in steps) else None
    if together is not None and better is not None:
        after = better.candidate
        steps.append(
            Step(
                together,
                f"no lever pays alone, together they do: {_pct(here.hit_rate)} -> {_pct(after.hit_rate)} "
                "with no FP8 KV, no write_back and no slower first token",
                here,
                after,
            )
        )
        if after.config.host_ratio > 0 and not hicache:
            hicache = True
            headline = (
                f"HiCache pays with {after.config.policy}: hit rate {_pct(here.hit_rate)} -> "
                f"{_pct(after.hit_rate)}, modelled TTFT mean {here.modelled.ttft_ms['mean']:.0f} -> "
                f"{after.modelled.ttft_ms['mean']:.0f} ms"
            )
        here = after
        better = better_candidate(cands, here, levers, host_memory_gb)
    if not steps:
        notes.insert(
            0,
            "no change pays: every candidate is within one point of the current configuration"
            if better is None
            else "no step pays on its own (each changes one lever and must add a point without slowing the "
            "first token)",
        )
    return Recommendation(hicache, headline, here, baseline, steps, notes, better)


def _together(here: Candidate, better: Better | None, levers: Levers | None) -> str | None:
    """When no single step paid: the better candidate as one step, if it pays from here and asks for no FP8
    KV, no write_back and no storage backend (the costs the steps weigh one at a time); its action."""
    if better is None or better.candidate.config.storage or cost(better.candidate, here, levers)[0]:
        return None
    c = better.candidate
    if not _pays(here, c):
        return None
    parts = []
    if c.config.pool != here.config.pool:
        lever = levers.pool_lever(c.config.pool) if levers is not None else None
        size = levers.size(c.config.pool) if levers is not None else f"{c.config.pool:,}"
        parts.append(f"device pool {size}" + (f" ({lever.text})" if lever is not None else ""))
    if c.config.host_ratio != here.config.host_ratio and c.config.host_ratio > 0:
        host = f"HiCache host tier {c.config.host_ratio:.3g}x, {c.config.write_policy}"
        if levers is not None:
            host += f" ({levers.host_lever(c.config.pool, c.config.host_ratio, None)})"
        parts.append(host)
    if (c.config.policy, c.config.policy_config) != (here.config.policy, here.config.policy_config):
        parts.append(f"eviction policy {c.config.policy}")
    if not parts or len(changed(c, here)) < 2:
        return None
    return "together: " + " and ".join(parts)


def _storage_step(
    cands: list[Candidate],
    here: Candidate,
    steps: list[Step],
    notes: list[str],
    slow: tuple[str, ...],
    typical_tokens: int,
) -> Candidate:
    """HiCache L3 behind the host tier: a step when it pays on this one instance, else a note that it pays
    only when instances should share (each reads the pages the others wrote); slow backends named."""
    if slow:
        notes.append(
            f"storage backends slower than recomputing a typical prompt ({typical_tokens:,} tokens) on this card: "
            f"{', '.join(slow)}; not tried"
        )
    tried = [c for c in cands if c.config.storage]
    stored = [c for c in tried if c.config.pool == here.config.pool]
    if not stored:
        if tried:
            pools = ", ".join(f"{p:,}" for p in sorted({c.config.pool for c in tried}))
            best_any = max(tried, key=lambda c: c.hit_rate)
            notes.append(
                f"storage tier (HiCache L3): tried at pools {pools}, not at {here.config.pool:,}; best there "
                f"{best_any.label()} at {_pct(best_any.hit_rate)}"
            )
        return here
    best = max(stored, key=lambda c: (round(c.hit_rate, 4), -c.modelled.ttft_ms["mean"]))
    if _pays(here, best):
        steps.append(
            Step(
                f"storage tier (HiCache L3, {best.config.storage}) behind the host tier; instances that should "
                "share prefixes point at one store",
                f"the host tier ({best.config.host_ratio:.3g}x) evicts prefixes that come back; L3 keeps what it "
                f"backed up: {best.result.storage_hit_tokens:,} prompt tokens come back from storage",
                here,
                best,
            )
        )
        return best
    notes.append(
        f"storage tier (HiCache L3, best {best.config.storage}): on one instance the hit rate moves "
        f"{_pct(here.hit_rate)} -> {_pct(best.hit_rate)}, too little to pay; it pays when instances should "
        "share, each reading the pages the others wrote"
    )
    return here
