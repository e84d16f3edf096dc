"""What a tool gap costs, for an agentic input: where each returning request's prefix was found against
the gap since its conversation's last answer (today's configuration and the recommendation replayed at
the load), the host pool that keeps a p95 gap's prefix cached, and tlru against lru.

The host pool is the LRU argument: a prefix survives a gap when the pool holds everything the agents
wrote in the meantime, so device + host must hold (tokens written a second at the load) x the p95 gap.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from harness.advise.grid import Candidate
from harness.advise.load import Load, at_load
from harness.sim.timing import CardProfile
from harness.whatif.tool_gap import ToolGapTable, offline_tool_gap
from harness.whatif.trace import Trace


@dataclass(frozen=True)
class AgentGaps:
    """The gap tables at the load and the host pool the p95 gap needs (pool units; 0: the device holds it)."""

    tables: dict[str, ToolGapTable]  # role (today, recommendation) -> its table
    written_tokens_per_s: float  # today's configuration at the load: prefill + decode tokens a second
    gap_p95_s: float
    pool_for_p95: int  # device + host, pool units
    host_for_p95: int  # of which host (pool units)
    policies: dict[str, float] = field(
        default_factory=dict
    )  # policy -> best one-at-a-time hit rate at today's pool

    def to_dict(self) -> dict[str, Any]:
        return {
            "gap_tables": {k: dataclasses.asdict(v) for k, v in self.tables.items()},
            "written_tokens_per_s": round(self.written_tokens_per_s, 1),
            "gap_p95_s": round(self.gap_p95_s, 3),
            "pool_for_p95_gap": self.pool_for_p95,
            "host_pool_for_p95_gap": self.host_for_p95,
            "policy_hit_rates": {k: round(v, 6) for k, v in self.policies.items()},
        }


def agent_gaps(a: Any, trace: Trace, load: Load, profile: CardProfile) -> AgentGaps | None:
    """The section for an agentic input (a: harness.advise.advice.Advice); None when no request returns."""
    from harness.whatif.replay import ideal_hits
    from harness.whatif.serve import engine

    loaded = at_load(trace, load)
    rec = a.recommendation
    tables: dict[str, ToolGapTable] = {}
    written = 0.0
    for role, cand in (("today", rec.baseline), ("recommendation", rec.chosen)):
        got = engine(loaded, cand.config, ideal_hits(trace, cand.config.page_size), profile)
        table = offline_tool_gap(loaded, got)
        if table is None:
            return None
        tables[role] = table
        if role == "today":
            res = got.result
            work = res.prompt_tokens - res.hit_tokens + sum(r.output_tokens for r in trace.requests)
            written = work / got.makespan_s if got.makespan_s > 0 else 0.0
    p95 = tables["today"].gap_p95_s
    need = math.ceil(written * p95 / max(trace.unit, 1))
    current = rec.baseline.config.pool
    return AgentGaps(tables, written, p95, need, max(0, need - current), _policies(a.candidates, current))


def _policies(cands: list[Candidate], pool: int) -> dict[str, float]:
    """Each eviction policy's best one-at-a-time hit rate at today's pool (any host tier): tlru was
    written for agents' returning sessions, lru is SGLang's default."""
    out: dict[str, float] = {}
    for c in cands:
        if c.config.pool == pool and not c.config.storage:
            out[c.config.policy] = max(out.get(c.config.policy, 0.0), c.hit_rate)
    return dict(sorted(out.items()))


def markdown(g: AgentGaps, unit: str, unit_tokens: int) -> list[str]:
    """The tool-gap section of advise.md."""
    t = g.tables["today"]
    out = [
        "",
        "## What a tool gap costs",
        "",
        f"Returning requests by the gap since their conversation's last answer (p50 {t.gap_p50_s:.0f} s, "
        f"p95 {t.gap_p95_s:.0f} s, p99 {t.gap_p99_s:.0f} s), replayed at the load: prompt tokens found on the "
        "device, in host memory, or recomputed.",
        "",
        "| gap s | requests | today: device / host / recomputed | recommendation: device / host / recomputed |",
        "|---|---|---|---|",
    ]
    rec = {(r.gap_lo_s, r.gap_hi_s): r for r in g.tables["recommendation"].rows}
    for r in t.rows:
        hi = "+" if r.gap_hi_s is None else f"-{r.gap_hi_s:g}"
        o = rec.get((r.gap_lo_s, r.gap_hi_s))
        cells = [_split(r)] + [_split(o) if o is not None else "-"]
        out.append(f"| {r.gap_lo_s:g}{hi} | {r.requests} | {cells[0]} | {cells[1]} |")
    pool_tokens = g.pool_for_p95 * unit_tokens
    out += [
        "",
        f"At the load the agents write {g.written_tokens_per_s:,.0f} tokens a second (today's configuration), so "
        f"a prefix survives a p95 gap ({g.gap_p95_s:.0f} s) under LRU only in a pool of {g.pool_for_p95:,} {unit} "
        f"({pool_tokens:,} tokens): "
        + (
            f"a host tier of {g.host_for_p95:,} {unit} beyond today's device pool."
            if g.host_for_p95
            else "today's device pool already holds it."
        ),
    ]
    if g.policies:
        pol = ", ".join(f"{k} {v:.1%}" for k, v in g.policies.items())
        out.append(f"Eviction policies at today's pool (one request at a time, best host tier each): {pol}.")
    return out


def _split(r: Any) -> str:
    p = max(r.prompt_tokens, 1)
    if r.device_tokens is None:
        return f"{r.cached_tokens / p:.0%} cached / {r.recomputed_tokens / p:.0%}"
    return f"{r.device_tokens / p:.0%} / {(r.host_tokens or 0) / p:.0%} / {r.recomputed_tokens / p:.0%}"
