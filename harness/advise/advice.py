"""One advise run from input to record: curve, working set, grid, break-even, recommendation.

The options are checked (`check`) before any of the work, so bad input costs nothing.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.advise import breakeven, grid
from harness.advise.curve import CurvePoint, curve_points, stack_distances
from harness.advise.launch_line import LaunchLine, fleet_launch, sglang_line
from harness.advise.levers import Levers
from harness.advise.load import Load, at_load, distinct, shown
from harness.advise.load import rows as load_rows
from harness.advise.node import Node, resolve, this_machine
from harness.advise.physics import service_times
from harness.advise.recommend import Recommendation, recommend
from harness.advise.replays import Replays, Work
from harness.advise.serveable import Lengths, Serveability, serveability
from harness.advise.slo import Slo
from harness.advise.working_set import WorkingSet, clock, working_set
from harness.errors import HarnessError
from harness.sim.timing import CardProfile, resolve_profile
from harness.whatif.grid import Config
from harness.whatif.inputs import read_input
from harness.whatif.replay import remember_ideal
from harness.whatif.trace import Trace


@dataclass(frozen=True)
class Options:
    card: str = "l4"
    model: str | None = None
    pool: int | None = None  # input units; None: the card x model default
    host_memory_gb: float | None = None  # None: the card's typical host
    slo: Slo | None = None
    curve_at: tuple[int, ...] = ()
    workers: int | None = None
    block_size: int = 512
    replicas: int = 1  # the largest --replicas count: how many share a node (harness.advise.node)
    replicas_per_node: int | None = None  # None: all on one node, as far as its GPUs go
    gpus_per_node: int | None = None  # None: this machine's when it has the card's GPU, else 8


@dataclass
class Advice:
    input: str
    card: str
    model: str
    unit: str  # tokens | blocks
    unit_tokens: int
    requests: int
    prompt_tokens: int
    current_pool: int
    device_pool: int  # the card x model default, in input units
    host_pool: int  # the largest host pool the grid tried, in input units
    curve: list[CurvePoint]
    ceiling: float
    knee_pool: int
    working_set: WorkingSet
    candidates: list[grid.Candidate]
    breakeven: dict[str, list[breakeven.TierCost]]
    recommendation: Recommendation
    seconds: dict[str, float] = field(default_factory=dict)
    confirmed: list[dict] = field(default_factory=list)
    confirm: Any = None  # harness.advise.confirm_info.ConfirmInfo: how the confirm ran, partial or whole
    notes: list[str] = field(default_factory=list)
    replicas: Any = None  # harness.advise.replicas.ReplicaAdvice with --replicas
    load: Any = None  # harness.advise.load.Load: the load of the at-load figures
    at_load: list[Any] = field(default_factory=list)  # harness.advise.load.AtLoad per shown candidate
    node: Node | None = None  # the host memory and GPUs the advice is sized for
    levers: Levers | None = None  # the card's memory chain: each candidate's launch line (launch_line)
    model_arg: str | None = None  # --model as given: the launch lines' --model-path
    slo: Any = None  # harness.advise.slo.Slo the capacity figures are at (harness.advise.sizing)
    headline_at_load: str = ""  # the headline's first sentence: GPUs needed at the user's load
    agents: Any = None  # harness.advise.agents.AgentGaps for an agentic input (the tool-gap section)
    serveable: Serveability | None = None  # what today's and the default pool reject, and the fixes

    @property
    def device_plus_host(self) -> int:
        """The pool the recommendation starts from (today's unless it rejects requests) with its host tier."""
        start = self.serveable.start_pool if self.serveable is not None else self.current_pool
        return start + self.host_pool

    def launch(self, c: grid.Candidate) -> LaunchLine:
        """The candidate as SGLang 0.5.23's launch command (harness.advise.launch_line)."""
        levers = self.levers or Levers(resolve_profile(self.card), self.unit_tokens, self.unit)
        return sglang_line(c.config, levers, self.model_arg)

    def fill_fleet_launch(self) -> None:
        """Each replica count's fleet as its worker and smg lines (`replicas.launch`)."""
        if self.replicas is None or self.levers is None:
            return
        per_node = self.node.per_node if self.node is not None else 1
        for n, f in self.replicas.fleets.items():
            self.replicas.launch[n] = fleet_launch(
                f.replicas, f.config, f.policy, f.shared_l3, self.levers, self.model_arg, per_node
            )


def profile_for(opts: Options) -> CardProfile:
    """The card x model physics; a --model that names nothing is an error here, not a silent 8B."""
    from harness.sim.models import ModelConfigError, builtin_names, load_model

    if opts.model:
        try:
            shape = load_model(opts.model)
        except ModelConfigError as e:
            raise HarnessError(f"--model: {e}") from None
        if shape is None:
            raise HarnessError(
                f"--model: {opts.model!r} is neither a folder with a config.json nor a built-in model "
                f"({', '.join(builtin_names())})"
            )
    return resolve_profile(opts.card, opts.model)


def check(inputs: list[Path], opts: Options) -> CardProfile:
    """Every option and input path, before any work; HarnessError names the culprit."""
    for p in inputs:
        if not p.exists():
            raise HarnessError(f"{p}: no such file or folder")
    if opts.pool is not None and opts.pool <= 0:
        raise HarnessError(f"--pool: {opts.pool} must be positive")
    for n in opts.curve_at:
        if n <= 0:
            raise HarnessError(f"--curve-at: {n} must be positive")
    if opts.host_memory_gb is not None and opts.host_memory_gb < 0:
        raise HarnessError(f"--host-memory: {opts.host_memory_gb:g} must be >= 0 GB")
    if opts.block_size <= 0:
        raise HarnessError(f"--block-size: {opts.block_size} must be positive")
    profile = profile_for(opts)
    node_for(opts, profile)  # --replicas-per-node / --gpus-per-node against each other
    return profile


def node_for(opts: Options, profile: CardProfile, pool_tokens: int | None = None) -> Node:
    """The node the advice is sized for; this machine is asked only for what the flags leave open (a
    unified-memory card's host tier: what a pool of `pool_tokens` leaves)."""
    ask = opts.host_memory_gb is None or opts.gpus_per_node is None
    machine = this_machine(profile) if ask else None
    return resolve(
        profile,
        opts.host_memory_gb,
        opts.replicas,
        opts.replicas_per_node,
        opts.gpus_per_node,
        machine,
        pool_tokens,
    )


def read(inputs: list[Path], opts: Options) -> list[Trace]:
    """Every input read (and so checked) before any of them is worked on."""
    return [read_input(p, opts.block_size) for p in inputs]


def advise(
    path: Path, opts: Options, profile: CardProfile, trace: Trace | None = None, load: Load | None = None
) -> Advice:
    """The whole advice on one input; with `load`, the shown candidates at that load too (one replica:
    the replicas step's fleets replay at load after it, harness.advise.load.shown_at_load)."""
    t0 = time.perf_counter()
    trace = trace if trace is not None else read_input(path, opts.block_size)
    t_read = time.perf_counter()
    sd = stack_distances(trace)
    t_curve = time.perf_counter()
    ws = working_set(trace, sd, clock(trace, service_times(trace, profile)))
    t_ws = time.perf_counter()
    unit_tokens = trace.unit
    device = max(profile.default_pool_tokens // unit_tokens, 1)
    current = opts.pool or _capture_pool(path) or device
    node = node_for(opts, profile, current * unit_tokens)
    host_mem = node.share_gb  # one replica's share of the node's host memory
    unit_name = "blocks" if trace.kind == "blocks" else "tokens"
    levers = Levers(profile, unit_tokens, unit_name)
    lengths = Lengths(trace, profile.context_length)
    serve = serveability(lengths, profile, levers, opts.model, current, device, node.gpus)
    start = serve.start_pool  # today's pool, unless it rejects requests a lever's pool serves
    if serve.tp > 1:  # one card cannot serve the input, --tp N can: every line runs on N GPUs
        levers = Levers(profile, unit_tokens, unit_name, tp=serve.tp)
    around = sorted({current, *grid.pools_around(start, device, sd)})
    most = lengths.rejects(start).requests  # no candidate rejects more than the pool the advice starts at
    pools = [
        p for p in around if (p == start or levers.reachable(p)) and lengths.rejects(p).requests <= most
    ]  # past FP8 at the top fraction: no lever; a pool that rejects requests: no candidate
    typical = _typical_prompt_tokens(trace)
    fast, slow = breakeven.storage_split(profile, typical)
    has_priorities = any(r.priority is not None for r in trace.requests)  # a spec's `priorities:`
    configs = grid.build(trace, pools, profile, host_mem, priorities=has_priorities, levers=levers)
    # the curve's named sizes read the host ratios the grid tries at today's pool (the L3 step adds none)
    ratios = [c.host_ratio for c in configs if c.pool == start]
    host_pool = int(start * max(ratios, default=0))
    named = sorted({current, device, start + host_pool, *opts.curve_at})
    loaded = at_load(trace, load) if load is not None else None
    remember_ideal(trace, 1, sd.request_hits)  # before the workers fork: every job reads it from the memo
    with Replays(Work(trace, profile, opts.slo, loaded), opts.workers) as pool:
        at_load_jobs: dict[Config, Future] = {}
        if loaded is not None:  # today's row at load (recommend's baseline) needs no step: it starts first
            today = Config("lru", start)
            at_load_jobs[today] = pool.submit("load", today)
        grid_jobs = [pool.submit("grid", c) for c in configs]
        curve_jobs = [pool.submit("curve", Config("lru", p, mode="exact")) for p in named]
        cands = grid.candidates(trace, configs, pool.gather(grid_jobs))
        t_grid = time.perf_counter()
        kv_gb = start * unit_tokens * levers.kv_bytes(start) / 1e9
        no_host = (
            f"{host_mem:g} GB of host memory holds {host_mem / kv_gb:.2f}x the device pool ({start:,} "
            f"{unit_name} = {kv_gb:,.0f} GB of KV); the grid tries "
            f"{' and '.join(f'{r:g}x' for r in grid.HOST_RATIOS)}"
            if host_mem is not None and kv_gb > 0
            else "no host ratio fits the host memory"
        )
        if node.unified:  # one memory for CPU and GPU: the host tier is what the device pool leaves
            no_host = node.unified
        rec = recommend(
            cands, start, ws, unit_name, no_host, slow, typical, levers=levers, host_memory_gb=host_mem
        )
        stored = grid.storage_configs(trace, rec.chosen.config.pool, profile, host_mem, fast, levers)
        # the rows at load as they stand: the L3 step rarely changes them, so they run beside its replays
        if loaded is not None:
            for c in distinct(shown(rec, cands)):
                if c not in at_load_jobs:
                    at_load_jobs[c] = pool.submit("load", c)
        if stored:  # L3 at the pool the steps before it chose, then the steps again with it in the grid
            cands += grid.run_storage(trace, stored, profile, opts.slo, pool=pool)
            rec = recommend(
                cands, start, ws, unit_name, no_host, slow, typical, levers=levers, host_memory_gb=host_mem
            )
        if host_mem is not None:
            rec.headline += f" [host memory: {_host_words(node)}]"
        if serve.headline:  # what rejects the traffic comes first (its own field too: Advice.serveable)
            rec.headline = f"{serve.headline} {rec.headline}"
        t_storage = time.perf_counter()
        exact = {p: r.hit_rate for p, r in zip(named, pool.gather(curve_jobs), strict=True)}
        pts = [dataclasses.replace(pt, replayed=exact.get(pt.pool)) for pt in curve_points(sd, named)]
        rows: list[Any] = []
        if loaded is not None:
            final = shown(rec, cands)
            need = distinct(final)
            pool.drop([f for c, f in at_load_jobs.items() if c not in need])
            jobs = [at_load_jobs[c] if c in at_load_jobs else pool.submit("load", c) for c in need]
            rows = load_rows(final, dict(zip(need, pool.gather(jobs), strict=True)))
    t_load = time.perf_counter()
    notes = list(trace.notes)
    rejecting = sorted(p for p in set(around) - set(pools) if lengths.rejects(p).requests > most)
    if rejecting:
        notes.append(
            "pools that reject requests SGLang 0.5.23 would take at a larger pool (prompt + output over the "
            f"pool) not offered: {', '.join(levers.size(p) for p in rejecting)}"
        )
    dropped = sorted(set(around) - set(pools) - set(rejecting))
    if dropped:
        notes.append(
            f"pools past FP8 KV at the largest memory fraction ({levers.largest_pool_tokens():,} tokens) not "
            f"offered: {', '.join(levers.size(p) for p in dropped)}"
        )
    if node.unified:
        notes.append(node.unified)
    if not has_priorities:
        notes.append("priority not in the grid: the input carries no request priorities")
    if sd.longest_request > min(pools):
        notes.append(
            f"the longest request holds {sd.longest_request:,} {unit_name}, more than the smallest pool "
            f"({min(pools):,}): below that size the one-pass curve is an upper bound"
        )
    return Advice(
        input=str(path),
        card=profile.name,
        model=profile.model,
        unit=unit_name,
        unit_tokens=unit_tokens,
        requests=len(trace.requests),
        prompt_tokens=sd.prompt_tokens,
        current_pool=current,
        device_pool=device,
        host_pool=host_pool,
        curve=pts,
        ceiling=sd.ceiling,
        knee_pool=sd.knee_pool,
        working_set=ws,
        candidates=cands,
        breakeven=breakeven.all_tiers(profile),
        recommendation=rec,
        seconds={
            "read": t_read - t0,
            "curve": t_curve - t_read,
            "working_set": t_ws - t_curve,
            "grid": t_grid - t_ws,
            "storage": t_storage - t_grid,
        }
        | ({"at_load": t_load - t_storage} if load is not None else {}),
        notes=notes,
        node=node,
        levers=levers,
        load=load,
        at_load=rows,
        model_arg=opts.model,
        serveable=serve,
    )


def _host_words(node: Node) -> str:
    """Where the host memory the advice sized for comes from, and a replica's share of it."""
    text = f"{node.host_memory_gb:g} GB a node, from {node.source}"
    if node.per_node > 1:
        text += f"; {node.share_gb:g} GB for each of the {node.per_node} replicas on a node"
    return text


def _typical_prompt_tokens(trace: Trace) -> int:
    """The median prompt in tokens: the size a storage backend's break-even is judged at."""
    import numpy as np

    return max(int(np.median([r.tokens for r in trace.requests])), 1) if trace.requests else 1


def _capture_pool(path: Path) -> int | None:
    """A capture point's server pool (`max_total_tokens` in its server_info.json), the --pool default."""
    import json

    from harness.capture import SERVER_INFO

    if not path.is_dir():
        return None
    try:
        info = json.loads((path.parent / SERVER_INFO).read_text())
    except (OSError, ValueError):
        return None
    pool = info.get("max_total_tokens") if isinstance(info, dict) else None
    return pool if isinstance(pool, int) and pool > 0 else None
