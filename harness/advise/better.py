"""The recommendation against its own evidence: the best candidate by the measure the candidates table
ranks with (hit rate, then modelled TTFT mean, then goodput under --slo). When it beats the chosen
configuration by MIN_GAIN or more, the advice names it with its figures and the costs that kept the
steps from it (the steps change one lever at a time, in the seed's order, and stay as they are).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.advise.grid import Candidate
from harness.advise.levers import Levers

MIN_GAIN = 0.01  # one point of hit rate: less is within what live runs scatter by
TIE_POINTS = 0.005  # within half a point of the best, the candidate that changes less is named first


def measure(c: Candidate) -> tuple[float, float, float]:
    """The candidates' order, best first when sorted descending: hit rate (to 0.01 point), then the
    lower modelled TTFT mean (to 1 µs), then goodput under --slo."""
    return (round(c.hit_rate, 4), -round(c.modelled.ttft_ms["mean"], 3), c.modelled.goodput_rps or 0.0)


def ranked(cands: list[Candidate]) -> list[Candidate]:
    """Best first by `measure`; ties keep the grid's order."""
    return sorted(cands, key=measure, reverse=True)


@dataclass(frozen=True)
class Better:
    """A candidate the steps did not reach that beats their choice by MIN_GAIN or more."""

    candidate: Candidate
    chosen: Candidate
    why: list[str]  # the costs the user must weigh, each a sentence

    @property
    def gain_points(self) -> float:
        return (self.candidate.hit_rate - self.chosen.hit_rate) * 100

    def figures(self) -> str:
        c, m = self.candidate, self.candidate.modelled
        good = "" if m.goodput_rps is None else f", goodput {m.goodput_rps:.2f} req/s"
        return (
            f"{c.label()}: hit rate {c.hit_rate:.1%} ({self.gain_points:+.1f} points over the recommendation's "
            f"{self.chosen.hit_rate:.1%}), modelled TTFT mean {m.ttft_ms['mean']:.1f} ms, p50 "
            f"{m.ttft_ms['p50']:.1f} ms, p99 {m.ttft_ms['p99']:.1f} ms{good}"
        )

    def line(self) -> str:
        return f"better by the candidates' own measure: {self.figures()}; not taken: {' '.join(self.why)}"

    def to_dict(self) -> dict:
        c, m = self.candidate, self.candidate.modelled
        return {
            "config": c.label(),
            "hit_rate": round(c.hit_rate, 6),
            "gain_points": round(self.gain_points, 3),
            "ttft_ms": {k: round(v, 3) for k, v in m.ttft_ms.items()},
            "goodput_rps": None if m.goodput_rps is None else round(m.goodput_rps, 4),
            "why": self.why,
        }


def better_candidate(
    cands: list[Candidate], chosen: Candidate, levers: Levers | None, host_memory_gb: float | None
) -> Better | None:
    """The candidate to name when the best beats `chosen` by MIN_GAIN of hit rate or more, with its costs:
    among those within TIE_POINTS of the best, the one that changes least (harness.advise.better.cost)."""
    if not cands:
        return None
    best = ranked(cands)[0]
    if best.hit_rate - chosen.hit_rate < MIN_GAIN:
        return None
    pick = preferred([c for c in cands if c.hit_rate - chosen.hit_rate >= MIN_GAIN], chosen, levers)
    return Better(pick, chosen, why_not(pick, chosen, levers, host_memory_gb))


def cost(c: Candidate, ref: Candidate, levers: Levers | None) -> tuple[int, int, int]:
    """What changing from `ref` to `c` asks of an operator, least first: FP8 KV (precision) and write_back
    (eviction-time copies the scheduler waits for) counted together, then the levers it moves."""
    lever = levers.pool_lever(c.config.pool) if levers is not None else None
    fp8 = int(lever is not None and lever.kind == "fp8")
    wb = int(c.config.host_ratio > 0 and c.config.write_policy == "write_back")
    return fp8 + wb, len(changed(c, ref)), fp8


def preferred(cands: list[Candidate], ref: Candidate, levers: Levers | None) -> Candidate:
    """The best by the candidates' measure, unless one within TIE_POINTS of its hit rate changes less from
    `ref` (fewer levers, no FP8, no write_back): a fraction of a millisecond of modelled TTFT is not worth a
    lever more."""
    top = ranked(cands)[0]
    near = [c for c in cands if top.hit_rate - c.hit_rate <= TIE_POINTS + 1e-12]
    return min(near, key=lambda c: (cost(c, ref, levers), tuple(-x for x in measure(c))))


def changed(b: Candidate, a: Candidate) -> list[str]:
    x, y = b.config, a.config
    out = []
    if x.pool != y.pool:
        out.append("device pool")
    if x.host_ratio != y.host_ratio:
        out.append("host tier")
    if x.host_ratio > 0 and y.host_ratio > 0 and x.write_policy != y.write_policy:
        out.append("write policy")
    if x.storage != y.storage:
        out.append("storage tier")
    if (x.policy, x.policy_config) != (y.policy, y.policy_config):
        out.append("eviction policy")
    return out


def why_not(
    best: Candidate, chosen: Candidate, levers: Levers | None, host_memory_gb: float | None
) -> list[str]:
    """Why the steps did not reach `best`: how they go, then each cost `best` carries over `chosen`."""
    b, c = best.config, chosen.config
    moved = changed(best, chosen)
    why = [
        "The steps change one lever at a time in the usual order (device pool, host tier with write_through, "
        "storage, eviction policy) and take a change only when it alone pays; this configuration differs in "
        f"{_and(moved) or 'nothing the steps vary'}."
    ]
    if b.pool > c.pool and levers is not None:
        lever = levers.pool_lever(b.pool)
        how = lever.text if lever is not None else "no lever reaches it"
        why.append(
            f"Memory: a device pool of {levers.size(b.pool)}, against {levers.size(c.pool)} now, takes {how}."
        )
        if lever is not None and lever.kind == "fp8":
            why.append("FP8 KV halves the precision of every cached key and value.")
    if b.host_ratio > 0 and levers is not None:
        need, now = levers.host_gb(b.pool, b.host_ratio), levers.host_gb(c.pool, c.host_ratio)
        if need > now * 1.001:
            have = "" if host_memory_gb is None else f" of the {host_memory_gb:g} GB host memory"
            why.append(
                f"Host memory: {need:,.1f} GB{have} for the host tier (the recommendation's {now:,.1f} GB)."
            )
    if b.host_ratio > 0 and c.host_ratio == 0:
        why.append(
            "Host bandwidth: every backed-up node is copied to host memory over the host link"
            + (f" ({levers.profile.h2d_gb_per_s:g} GB/s)." if levers is not None else ".")
        )
    if (
        b.host_ratio > 0
        and b.write_policy == "write_back"
        and not (c.host_ratio > 0 and c.write_policy == b.write_policy)
    ):
        written = best.result.host_written_tokens
        cost = ""
        if levers is not None and best.result.requests:
            per = levers.copy_ms(written) / best.result.requests
            cost = (
                f": {written:,} tokens copied at eviction over the {levers.profile.h2d_gb_per_s:g} GB/s host "
                f"link, {per:.1f} ms a request on average, which the modelled TTFT above leaves out"
            )
        why.append(
            "write_back copies a node to host only when the device evicts it, and the scheduler waits for those "
            f"copies (the sim models the stall: blocking_write_back){cost}."
        )
    if b.storage and b.storage != c.storage:
        why.append(f"A storage backend ({b.storage}) to run and size.")
    tb, tc = best.modelled.ttft_ms["mean"], chosen.modelled.ttft_ms["mean"]
    if tb > tc:
        why.append(f"Latency: its modelled TTFT mean is higher ({tb:.1f} ms against {tc:.1f} ms).")
    return why


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""
