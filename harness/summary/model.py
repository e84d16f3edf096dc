"""The records of `summaries/<node>.json`, the product's main output: one type per level of the file.

The base (harness.summary.record) says why these are pydantic models; the figures of a point × seed
are in harness.summary.figures. docs/summary.md is generated from all three (tests/helpers/summary_doc.py).
"""

from __future__ import annotations

from pydantic import Field, JsonValue, StrictBool, StrictInt, StrictStr

from harness.summary.figures import (
    ClockSeries,
    Figures,
    Goodput,
    Latency,
    Modelled,
    Pcts,
    Telemetry,
    Throughput,
)
from harness.summary.funnel import HealthVerdict, HicacheFunnel, NotJudged
from harness.summary.record import JsonObject, Num, Record
from harness.summary.search import SearchResult
from harness.summary.tool_gap import ToolGap

__all__ = [
    "ClockSeries",
    "Figures",
    "Goodput",
    "JsonObject",
    "JsonValue",
    "Latency",
    "Modelled",
    "Num",
    "Pcts",
    "Record",
    "Telemetry",
    "Throughput",
]


# ---------------------------------------------------------------- verdicts and the cold-cache judgement


class ClockVerdict(Record):
    """Can this point's timings be trusted: harness.verdicts.point_verdict(telemetry, verdict_thresholds)."""

    verdict: StrictStr = Field(
        description="ok, below-floor, prefill-below-floor, thermal, hw-slowdown, power-brake or no-telemetry"
    )
    reasons: list[StrictStr] = Field(default_factory=list, description="every reason that applies, in full")
    flagged: StrictBool = Field(description="counts against `harness validate`'s exit code")
    clock_basis: StrictStr | None = Field(
        None,
        description="the clock the verdict judged: `busy-median` (throughput), `prefill-window` (TTFT: "
        "prefill-below-floor); null without telemetry",
    )


class FirstRequestOver(Record):
    """A group's (session's) least-cached request that found more cached than the allowance."""

    unit: StrictStr = Field(description="`group N` or `session N`")
    index: StrictInt | None = Field(None, description="the request's position in the schedule")
    cached: StrictInt
    prompt: StrictInt | None = None


class FirstRequests(Record):
    """Each group's (session's) least-cached request, held to one block on a cold cache."""

    checked: StrictInt = Field(description="groups/sessions judged")
    allowance: StrictInt = Field(description="tokens a first request may find cached: max(block, 16)")
    block_tokens: StrictInt | None = None
    over: list[FirstRequestOver] = Field(default_factory=list)
    unknown: StrictInt = Field(0, description="requests whose server did not report cached tokens")
    cold: StrictBool = True


class CacheJudgement(Record):
    """Did a seed begin on a cold cache (harness.verdicts.cold), from point.json's reset facts and its requests."""

    state: StrictStr = Field(description="cold, cache-not-cold or warm-start")
    flags: dict[str, StrictStr] = Field(default_factory=dict, description="the states raised, and why")
    first_requests: FirstRequests | None = None


class Pair(Record):
    """Two servers of one experiment at one sweep value: do their clocks confound the comparison
    (harness.verdicts.pair_verdicts)."""

    experiment: StrictStr
    sweep: JsonValue = None
    point_key: StrictStr | None = None
    a: StrictStr | None = None
    b: StrictStr | None = None
    clock_a_mhz: Num | None = Field(None, description="a's SM clock on `clock_basis`")
    clock_b_mhz: Num | None = None
    ratio: Num | None = Field(None, description="the faster clock / the slower")
    clock_basis: StrictStr | None = Field(
        None,
        description="the clock judged: `prefill-window` (a TTFT comparison: the default), `busy-median` when "
        "either point has too few prefill-window samples (the reasons say so)",
    )
    busy_a_mhz: Num | None = Field(None, description="a's busy-median SM clock (what its throughput ran at)")
    busy_b_mhz: Num | None = None
    verdict: StrictStr = Field(description="ok, clock-confounded or no-telemetry")
    reasons: list[StrictStr] = Field(default_factory=list)
    flagged: StrictBool = False


class SummaryVerdict(Record):
    """The summary's verdicts in one line (new in schema 2), computed once by summarize."""

    line: StrictStr = Field(description="the verdict line `harness validate` and `make bench` print")
    flagged: StrictInt = Field(description="points and pairs that fail `harness validate`")
    ok: StrictBool


# ---------------------------------------------------------------- a point, its seeds, the servers


class Prediction(Record):
    """The what-if replay against the measured hit rate (harness.summarize.prediction)."""

    measured_source: StrictStr | None = Field(None, description="which figure `measured_hit_rate` is")
    diff_points: Num | None = Field(None, description="measured − predicted, percentage points")
    flag: StrictBool = Field(False, description="true when the difference exceeds `flag_points`")
    flag_points: Num = 3.0
    per_seed: list[Num] = Field(default_factory=list)
    why_none: StrictStr | None = Field(None, description="why there is no prediction")


class PromptCheck(Record):
    """Trace points: requests whose server-side `prompt_tokens` differ from the prompt built."""

    checked: StrictInt = 0
    differ: StrictInt = 0


class Seed(Record):
    status: StrictStr | None = Field(
        None, description="point.json's status: ok, partial, failed, interrupted, running, or missing"
    )
    path: StrictStr | None = Field(None, description="the seed's capture folder")
    figures: Figures = Field(default_factory=Figures)
    telemetry: Telemetry = Field(default_factory=Telemetry, description="this seed's stats")
    failure: JsonValue = Field(None, description="point.json's failure, when it gives one")
    cache: CacheJudgement | None = None


class Point(Record):
    """One experiment × server × sweep point: its seeds, their median and spread, and its verdicts."""

    experiment: StrictStr
    server: StrictStr
    sweep: JsonObject = Field(
        default_factory=dict, description='the sweep values of the point, e.g. `{"groups": 16}`'
    )
    point_key: StrictStr = Field(
        "default", description="the sweep without the seed, `groups=16` (`default` with no sweep)"
    )
    status: StrictStr | None = Field(
        None,
        description="`ok` unless some seed's point.json is not ok; then the worst of them: `partial`, `interrupted`, `failed`, or `missing`",
    )
    seed_status: dict[str, StrictStr] = Field(default_factory=dict, description="`{seed: status}`")
    median_over: StrictStr | None = Field(
        None, description="`ok seeds` (not-ok seeds are kept but never averaged in), or `all seeds (none ok)`"
    )
    workload_kind: StrictStr | None = Field(None, description="`shared-prefix`, `multi-turn`, `trace`")
    prompt_tokens_to_keep: StrictInt | None = Field(
        None, description="groups × system_prompt_tokens, for shared-prefix"
    )
    seeds: dict[str, Seed] = Field(default_factory=dict)
    median: Figures = Field(default_factory=Figures, description="median over the seeds in `median_over`")
    spread: JsonObject = Field(
        default_factory=dict, description="`{figure: [min, max]}` over the same seeds (objects key by key)"
    )
    interval: JsonObject = Field(
        default_factory=dict,
        description="`{figure: [low, high]}`: the 95% Student-t interval of the mean over the same seeds, for TTFT p50/p99, TPOT, throughput, hit rate, goodput and a sim's modelled TTFT p50, tok/s and goodput (2+ seeds, clipped to the figure's range; [capacity.md](capacity.md))",
    )
    telemetry: Telemetry | None = Field(None, description="over all seeds' samples")
    modelled: Modelled | None = Field(None, description="sim points only")
    verdict: ClockVerdict | None = None
    clock_series: dict[str, ClockSeries] = Field(default_factory=dict, description="`{seed: series}`")
    evidence: list[StrictStr] = Field(
        default_factory=list,
        description="verbatim prefill lines of the first seed: the first, then up to three with `#cached-token` > 0 (vLLM: the point's reset line and the stats line its figure comes from)",
    )
    block_size: StrictInt | None = Field(
        None, description="the server's block (page) size: it caps what can be cached"
    )
    cache_state: StrictStr | None = Field(
        None,
        description="`cold`, `cache-not-cold` or `warm-start`, the worst over seeds (docs/reading-results.md)",
    )
    cache_flags: dict[str, StrictStr] = Field(
        default_factory=dict, description='`{flag: "seed N: why"}` for the flags raised'
    )
    predicted_hit_rate: Num | None = Field(
        None,
        description="what `harness whatif` predicts for exactly the requests this point sent, in their send order, at its concurrency, on the server's own cache settings (rebuilt from server_info.json; median over seeds); null when they are unknown (an attached server) or the ids sent cannot be rebuilt (`why_none`; [prediction.md](prediction.md))",
    )
    measured_hit_rate: Num | None = Field(
        None,
        description="the first of `hit_rate_usage`, `hit_rate_log`, `hit_rate_counters`, `hit_rate_timings` the server gave",
    )
    prediction: Prediction | None = None
    hicache_funnel: dict[str, HicacheFunnel] | None = Field(
        None,
        description="`{seed: funnel}`: tokens through the HiCache tiers, HiCache points only ([faults.md](faults.md), health verdicts)",
    )
    health: list[HealthVerdict] | None = Field(
        None,
        description="every health verdict that applies to a seed (host-tier-inert, evict-storm, over-eviction, stalled, crashed)",
    )
    not_judged: list[NotJudged] | None = Field(
        None,
        description="each health verdict that could not be judged on a seed, and why (no token ids, no KV gauges, no HiCache counters, too few evictions)",
    )
    metrics_timeline: dict[str, dict[str, list[Num | None]]] | None = Field(
        None,
        description="`{seed: {series: values}}`: the server's gauges and rates over the point, thinned for the page's chart",
    )
    ideal_hit_rate: Num | None = Field(
        None, description="the hit rate of an unbounded cache over the requests sent"
    )
    ideal_basis: StrictStr | None = Field(None, description="how `ideal_hit_rate` was computed")
    prompt_check: PromptCheck | None = None
    tool_gap: ToolGap | None = Field(
        None,
        description="agentic traces: returning requests by the gap since their conversation's previous answer, with their cached tokens by tier ([agentic-traces.md](agentic-traces.md))",
    )


class CacheFacts(Record):
    """Block (page) size and pool: vLLM's `vllm:cache_config_info` labels (and its other labels), else SGLang's server info."""

    block_size: StrictInt | None = None
    num_blocks: StrictInt | None = Field(
        None, description="vLLM: `num_gpu_blocks`, the device pool in blocks"
    )
    pool_tokens: StrictInt | None = None
    kv_cache_memory_bytes: Num | None = Field(None, description="vLLM: the KV cache's memory")
    enable_prefix_caching: StrictBool | None = Field(None, description="vLLM: whether prefix caching was on")
    kv_offloading_backend: StrictStr | None = Field(
        None, description="vLLM: the KV offloading backend (`native`, …), or null"
    )
    kv_offloading_size: Num | None = Field(None, description="vLLM: the offloading tier's size, or null")
    cache_dtype: StrictStr | None = Field(None, description="vLLM: the KV cache's dtype (`auto`, …)")
    source: StrictStr | None = Field(None, description="`vllm:cache_config_info`, `server_info`, or null")


class ServerLog(Record):
    path: StrictStr | None = None
    lines: StrictInt = 0
    counts: dict[str, StrictInt] = Field(
        default_factory=dict, description="records by kind; `unknown`: lines no pattern matched"
    )
    time_shift_s: Num = Field(0.0, description="added to log times written in another time zone; 0 normally")


class Pool(Record):
    """Pool sizes the log reported (harness.serverlog.pool_sizes)."""

    device_tokens: StrictInt | None = Field(
        None, description="the last `KV Cache … allocated` line: post-capture resizes win"
    )
    max_total_num_tokens: StrictInt | None = None
    host_tokens: StrictInt | None = Field(None, description="HiCache's host tier")
    host_gb: Num | None = None
    kv_pools: dict[str, StrictInt] | None = Field(None, description="`{label: tokens}` per labelled pool")


class Server(Record):
    cache: CacheFacts = Field(default_factory=CacheFacts)
    args: JsonValue = Field(
        None, description="the server's arguments from the manifest (a list or an object), else null"
    )
    server_info: JsonValue = Field(
        None, description="server_info.json (SGLang's `/get_server_info`, vLLM's `/v1/models`) or null"
    )
    time_scale: Num | None = Field(
        None,
        description="a sim server's `--time-scale` X: it only paced the run, so modelled figures come from `points[].modelled`; null for real servers",
    )
    pool: Pool = Field(default_factory=Pool)
    log: ServerLog = Field(default_factory=ServerLog)
    search: SearchResult | None = Field(None, description="a capacity search's result (spec `search:`)")
    replicas: JsonObject | None = Field(
        None,
        description="a replicas profile's `replicas.json`: `replicas`, `policy`, the gateway's `router_argv`, `storage` (`own`/`shared`), `gpus` per worker, and every launch's worker URLs; `server_info`, `pool` and `log` are then the first worker's ([replicas.md](replicas.md))",
    )
    worker_logs: dict[str, StrictStr] | None = Field(None, description="`{worker: its server.log}`")

    def info(self) -> JsonObject:
        """server_info as an object ({} when the server gave none): the server's own keys, read by name."""
        return self.server_info if isinstance(self.server_info, dict) else {}


class Experiment(Record):
    path: StrictStr | None = Field(None, description="the experiment's capture folder")
    manifest: JsonObject = Field(
        default_factory=dict,
        description="manifest.json as `harness bench` or `harness run` wrote it (spec, versions, git sha, host, GPUs, start time)",
    )
    servers: dict[str, Server] = Field(default_factory=dict)


class Problem(Record):
    """A capture file that was missing, truncated or unreadable, and what was done."""

    path: StrictStr
    reason: StrictStr


class Summary(Record):
    """`summaries/<node>.json`. A `real_server` object is added by harness.realserver.suite (`make bench-real`)."""

    schema_version: StrictInt | StrictStr = Field(description="2; bumped when a field changes meaning")
    node: StrictStr = Field("?", description="manifest `node`, else the folder above the experiment")
    generated_at: StrictStr | None = Field(None, description="ISO 8601, local zone")
    generated_on: StrictStr | None = Field(None, description="the host")
    harness_version: StrictStr | None = None
    sources: list[StrictStr] = Field(default_factory=list, description="the capture folders given")
    experiments: dict[str, Experiment] = Field(default_factory=dict)
    points: list[Point] = Field(description="one per experiment × server × sweep point")
    pairs: list[Pair] = Field(default_factory=list)
    verdict_thresholds: JsonObject | None = Field(
        None,
        description="what every verdict was computed with: `clock_floor_mhz`, `clock_floor_ratio`, `max_thermal_fraction`, `max_ab_clock_ratio`; `harness validate` at these shows the stored verdicts, at others recomputes and says so",
    )
    verdict: SummaryVerdict | None = Field(
        None, description="new in schema 2; a schema-1 file gets it when read"
    )
    notes: list[StrictStr] = Field(default_factory=list, description="anything else the reader should know")
    problems: list[Problem] = Field(default_factory=list)
