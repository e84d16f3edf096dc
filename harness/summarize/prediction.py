"""What the what-if engine predicts for a point, beside what the server measured (issue 14).

When a server's cache settings are known (serve-sim's server_info echoes its flags and its card;
SGLang's server_info carries the same cache keys), each seed's requests are replayed offline through
`harness.whatif` -- exactly the requests that were sent, in the order they were sent, at the point's
concurrency, with the answers the server gave -- and the point gets `predicted_hit_rate` beside
`measured_hit_rate`. A difference over FLAG_POINTS percentage points is flagged. A trace point also
gets the trace's ideal hit rate (an unbounded cache) over the requests actually sent.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.spec import TraceWorkload, Workload
from harness.summarize.read import SeedCapture
from harness.summary import Figures, Point
from harness.summary.model import Prediction, PromptCheck

FLAG_POINTS = 3.0
MEASURED_SOURCES = ("hit_rate_usage", "hit_rate_log", "hit_rate_counters", "hit_rate_timings")


def engine_from_info(info: Any):
    """The live server's EngineConfig from its server_info, or a string saying why it is unknown."""
    from harness.sim.engine import EngineConfig
    from harness.sim.timing import CardProfile

    if not isinstance(info, dict):
        return "no server_info.json: the server's cache settings are unknown (an attached server)"
    pool = info.get("max_total_num_tokens")
    if not isinstance(pool, int) or isinstance(pool, bool) or pool <= 0:
        return "server_info has no max_total_num_tokens"
    if info.get("disable_radix_cache"):
        return "the radix cache is disabled"
    card = info.get("card")
    profile = None
    if isinstance(card, dict):
        try:
            profile = CardProfile(**card)
        except TypeError:
            profile = None
    pc = info.get("radix_eviction_policy_config")
    if isinstance(pc, str):
        try:
            pc = json.loads(pc)
        except ValueError:
            return f"server_info: radix_eviction_policy_config is not JSON: {pc!r:.60}"
    ns = argparse.Namespace(
        max_total_tokens=pool,
        page_size=info.get("page_size") or 1,
        radix_eviction_policy=info.get("radix_eviction_policy") or "lru",
        policy_config=pc if isinstance(pc, dict) else {},
        disable_radix_cache=False,
        enable_hierarchical_cache=bool(info.get("enable_hierarchical_cache")),
        hicache_ratio=info.get("hicache_ratio"),
        hicache_size=info.get("hicache_size") or 0.0,
        hicache_write_policy=info.get("hicache_write_policy") or "write_through",
        max_running_requests=info.get("max_running_requests"),
        chunked_prefill_size=info.get("chunked_prefill_size"),
        max_prefill_tokens=info.get("max_prefill_tokens") or 16384,
        decode_log_interval=info.get("decode_log_interval") or 40,
        sim_profile=profile,
        card_profile=info.get("card_profile") if profile is None else None,
        kv_cache_dtype=info.get("kv_cache_dtype") or "auto",
        context_length=info.get("context_length"),
        sim_radix_tree=info.get("sim_radix_tree") or "unified",
        sim_ingest_latency_ms=info.get("sim_ingest_latency_ms"),  # a real server's: None, the default
        sim_idle_poll_ms=info.get("sim_idle_poll_ms"),
        enable_priority_scheduling=bool(info.get("enable_priority_scheduling")),
        schedule_low_priority_values_first=bool(info.get("schedule_low_priority_values_first")),
        disable_priority_preemption=bool(info.get("disable_priority_preemption")),
        priority_scheduling_preemption_threshold=info.get("priority_scheduling_preemption_threshold", 10),
        max_queued_requests=info.get("max_queued_requests"),
    )
    if ns.card_profile is None and profile is None:
        from harness.sim.timing import DEFAULT_PROFILE

        ns.card_profile = DEFAULT_PROFILE
    try:
        return EngineConfig.from_args(ns)
    except (HarnessError, ValueError, TypeError) as e:
        return f"server_info: cannot rebuild the engine ({e})"


def measured(median: Figures) -> tuple[float | None, str | None]:
    """The point's measured hit rate: the first source the server gave."""
    for k in MEASURED_SOURCES:
        v = median.number(k)
        if v is not None:
            return float(v), k
    return None, None


def predict_seed(sc: SeedCapture, econf, info: dict[str, Any] | None = None) -> tuple[float, float, int]:
    """(predicted hit rate, ideal hit rate, requests) of one seed's sent requests, replayed offline with
    the ids this server saw (`info`: its server_info, which says whether it is the sim)."""
    from harness.whatif.grid import Config
    from harness.whatif.inputs import read_capture
    from harness.whatif.replay import replay_engine

    trace = read_capture(Path(sc.path), info)
    cfg = Config(
        policy=econf.policy,
        pool=int(econf.pool_tokens),
        host_ratio=float(econf.hicache_ratio or 2.0) if econf.hicache else 0.0,
        write_policy=econf.hicache_write_policy,
        page_size=econf.page_size,
        policy_config=tuple(sorted(econf.policy_config.items())),
        tree=econf.radix_tree,
    )
    res = replay_engine(trace, cfg, econf=econf)
    return res.hit_rate, res.ideal_rate, res.requests


def add_prediction(
    point: Point, seeds: list[SeedCapture], info: Any, workload: Workload | None, replicas: int = 1
) -> None:
    """predicted_hit_rate, measured_hit_rate, their difference and flag; a trace point's ideal hit rate.
    Several replicas get none: the replay is of one instance, and where requests land decides the hits."""
    import statistics

    got, ideal, why = [], [], None
    econf = engine_from_info(info)
    if replicas > 1:
        why = f"{replicas} replicas behind a router: the what-if replays one instance, not the routing"
    elif isinstance(econf, str):
        why = econf
    else:
        for sc in seeds:
            if not sc.requests:
                continue
            try:
                hit, ide, _n = predict_seed(sc, econf, info)
            except HarnessError as e:
                why = str(e)
                break
            got.append(hit)
            ideal.append(ide)
    meas, source = measured(point.median)
    pred = statistics.median(got) if got and why is None else None
    diff = (meas - pred) * 100 if pred is not None and meas is not None else None
    point.predicted_hit_rate = pred
    point.measured_hit_rate = meas
    point.prediction = Prediction(
        measured_source=source,
        diff_points=diff,
        flag=bool(diff is not None and abs(diff) > FLAG_POINTS),
        flag_points=FLAG_POINTS,
        per_seed=got if why is None else [],
        why_none=why if pred is None else None,
    )
    if isinstance(workload, TraceWorkload):
        point.ideal_hit_rate, point.ideal_basis = trace_ideal(seeds, workload, ideal)
        point.prompt_check = PromptCheck.model_validate(prompt_check(seeds))
    elif ideal and why is None:  # synthetic workloads: the replay's unbounded-cache figure
        point.ideal_hit_rate = statistics.median(ideal)
        point.ideal_basis = "what-if replay of the prompts sent with an unbounded cache"


def prompt_check(seeds: list[SeedCapture]) -> dict[str, int]:
    """Requests whose server-side prompt_tokens differ from the prompt built (a text prompt that did not
    round-trip through the server's tokenizer to the trace's blocks), over the requests both counted."""
    checked = differ = 0
    for sc in seeds:
        for r in sc.requests:
            want, got = r.get("expected_prompt_tokens"), r.get("prompt_tokens")
            if isinstance(want, int) and isinstance(got, int):
                checked += 1
                differ += want != got
    return {"checked": checked, "differ": differ}


def trace_ideal(
    seeds: list[SeedCapture], wl: TraceWorkload, replayed: list[float]
) -> tuple[float | None, str | None]:
    """A Mooncake slice's ideal hit rate over the requests sent (the trace README's definition, in blocks);
    other formats: the what-if replay's unbounded-cache figure for the prompts sent."""
    import statistics

    if wl.format == "mooncake" and seeds:
        from harness.workloads.traces import mooncake_ideal

        path = wl.path  # resolved by harness.spec from the spec's folder
        if not path.is_file():
            return None, f"trace file {path} not found"
        rates = []
        for sc in seeds:
            sent = {r["index"] for r in sc.requests if r.get("sent_mono") is not None and not r.get("warmup")}
            try:
                _n, hit, total = mooncake_ideal(path, wl.start, wl.limit, wl.block_tokens, sent)
            except HarnessError as e:
                return None, str(e)
            rates.append(hit / total if total else 0.0)
        return statistics.median(rates), "trace blocks: hits of an unbounded cache over the requests sent"
    if replayed:
        return statistics.median(replayed), "what-if replay of the prompts sent with an unbounded cache"
    return None, None
