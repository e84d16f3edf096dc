"""Advice -> advise.json (the keys issue 24 names: curve, working_set, candidates, recommendation)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.advise.advice import Advice
from harness.advise.better import ranked
from harness.advise.breakeven import slower_than_recompute


def to_dict(a: Advice) -> dict:
    best_first = ranked(a.candidates)  # the recommendation's own measure (harness.advise.better)
    return {
        "input": a.input,
        "card": a.card,
        "model": a.model,
        "unit": a.unit,
        "unit_tokens": a.unit_tokens,
        "requests": a.requests,
        "prompt_tokens": a.prompt_tokens,
        "pools": {"current": a.current_pool, "device": a.device_pool, "host": a.host_pool},
        "curve": [
            {"pool": p.pool, "hit_rate": round(p.hit_rate, 6)}
            | ({} if p.replayed is None else {"replayed_hit_rate": round(p.replayed, 6)})
            for p in a.curve
        ],
        "ceiling": round(a.ceiling, 6),
        "knee_pool": a.knee_pool,
        "working_set": a.working_set.to_dict(),
        "node": None if a.node is None else a.node.to_dict(),
        "serveable": None if a.serveable is None else a.serveable.to_dict(),
        "candidates": [c.to_dict() | {"launch": a.launch(c).to_dict()} for c in best_first],
        "breakeven": {tier: [t.to_dict() for t in rows] for tier, rows in a.breakeven.items()},
        "slower_than_recompute": slower_than_recompute(a.breakeven),
        "recommendation": _with_launch(a),
        "confirmed": a.confirmed,
        **({"confirm": a.confirm.to_dict()} if a.confirm is not None else {}),
        **({"confirm_capacity": a.confirm.capacity.to_dict()} if a.confirm and a.confirm.capacity else {}),
        "seconds": {k: round(v, 3) for k, v in a.seconds.items()},
        "slo": None if a.slo is None else a.slo.to_dict(),
        "headline_at_load": a.headline_at_load,
        **({"agents": _agents(a)} if a.load is not None and a.load.agents else {}),
        "modelled": {
            "load": None if a.load is None else a.load.to_dict(),
            "one_at_a_time": "curve, candidates, steps and replicas rows",
            "at_load": [r.to_dict() for r in a.at_load],
        },
        "notes": a.notes,
        **({"replicas": a.replicas.to_dict()} if a.replicas is not None else {}),
    }


def _agents(a: Advice) -> dict:
    """Agents per replica for each shown candidate (issue 59: the pool holds N sessions; with a host tier,
    M), at the SLO the capacity search judged."""
    return {
        "agents": a.load.concurrency,
        "agents_per_replica": {
            r.role: (r.capacity.scale if r.capacity is not None else None) for r in a.at_load
        },
        "gpus_needed": {r.role: r.gpus_needed for r in a.at_load},
        "slo": None if a.slo is None else a.slo.describe(),
        **(a.agents.to_dict() if a.agents is not None else {}),
    }


def _with_launch(a: Advice) -> dict:
    """The recommendation with the launch line of its configuration, each step's and the better candidate's."""
    r = a.recommendation
    d = r.to_dict()
    d["launch"] = a.launch(r.chosen).to_dict()
    d["baseline_launch"] = a.launch(r.baseline).to_dict()
    for s, sd in zip(r.steps, d["steps"], strict=True):
        if s.after is not None:
            sd["launch"] = a.launch(s.after).to_dict()
    if r.better is not None:
        d["better_candidate"]["launch"] = a.launch(r.better.candidate).to_dict()
    return d


def write_json(a: Advice, path: Path) -> Path:
    path.write_text(json.dumps(to_dict(a), indent=2) + "\n")
    return path
