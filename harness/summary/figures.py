"""The figures of a point × seed and of their median: request figures, latency, goodput, telemetry.

Written by harness.summarize.figures (one seed) and merged over seeds by harness.summarize.summary.
"""

from __future__ import annotations

from pydantic import Field, JsonValue, StrictBool, StrictInt, StrictStr

from harness.summary.anatomy import MissAnatomy
from harness.summary.record import JsonObject, Num, Record


class Pcts(Record):
    """Percentiles over a point's ok requests (pandas linear quantiles); null where no request gave a value."""

    p50: Num | None = None
    p90: Num | None = None
    p99: Num | None = None


class Latency(Record):
    """Each `{p50, p90, p99}` over ok requests."""

    ttft_s: Pcts = Field(default_factory=Pcts, description="time to first token, from the scheduled send")
    tpot_s: Pcts = Field(
        default_factory=Pcts, description="(E2E − TTFT) / (completion tokens − 1) per request"
    )
    itl_s: Pcts = Field(
        default_factory=Pcts,
        description="per output token: an event carrying k tokens (per the server's per-event counts) gives k gaps of gap / k",
    )
    e2e_s: Pcts = Field(default_factory=Pcts, description="scheduled send → done")


class Throughput(Record):
    """Of ok requests over `duration_s`."""

    requests_per_s: Num | None = None
    output_tokens_per_s: Num | None = None


class Goodput(Record):
    """With a spec `slo` only (null without one: never a made-up bound)."""

    fraction: Num | None = Field(
        None,
        description="ok requests within every bound / scheduled requests (less those a `duration_s` left unsent)",
    )
    requests_per_s: Num | None = Field(None, description="those requests per second")
    good: Num | None = Field(None, description="how many requests were within every bound")
    slo: dict[str, Num] = Field(
        default_factory=dict, description="the spec's bounds (ms): `ttft_ms`, `tpot_ms`, `e2e_ms`"
    )


class Modelled(Record):
    """A sim point's figures on the modelled card, from the sim's virtual clock (harness.summarize.modelled):
    medians over seeds; never wall-clock ÷ `--time-scale`. Null for real servers."""

    ttft_ms: Pcts | None = Field(None, description="first token − arrival")
    tpot_ms: Pcts | None = Field(
        None, description="(finish − first token) / (completion tokens − 1), answers of 2+ tokens"
    )
    output_tok_s: Num | None = Field(None, description="Σ completion tokens / (last finish − first arrival)")
    requests: Num | None = None
    goodput: Goodput | None = Field(
        None,
        description="the spec `slo` judged on the modelled clock (what a capacity search judges a sim probe by); null without an `slo`",
    )
    source: StrictStr | None = Field(
        None,
        description="`sim virtual clock (request stamps)`: the records' `sim_time`; `… (server log)`: the point's `Sim request finished` lines, for captures without them",
    )
    wall_overhead_max: Num | None = Field(
        None,
        description="the largest of the sim's wall-clock overhead warnings in the point's log slice, as a fraction of the paced step time; null without warnings",
    )
    notes: list[StrictStr] = Field(default_factory=list, description="what those warnings mean; [] without")


class WorkerFigures(Record):
    """One worker of a replicas profile over the point (`figures.workers.<w>`): its requests by the gateway's
    routed-worker header, its own log slice and its own counter deltas (harness.summarize.replicas)."""

    requests: Num | None = Field(None, description="measured requests the gateway routed to it")
    ok: Num | None = None
    prompt_tokens: Num | None = Field(None, description="usage sums over its ok requests")
    cached_tokens: Num | None = None
    hit_rate_usage: Num | None = None
    cached_host_tokens: Num | None = Field(None, description="usage split: its host-tier hits")
    cached_storage_tokens: Num | None = Field(None, description="usage split: its L3 hits")
    ttft_p50_s: Num | None = None
    ttft_p99_s: Num | None = None
    modelled_ttft_p50_ms: Num | None = Field(None, description="a sim worker's, on the modelled card")
    modelled_ttft_p99_ms: Num | None = None
    log_new_tokens: Num | None = Field(None, description="Σ `#new-token` over its prefill lines")
    log_cached_tokens: Num | None = None
    hit_rate_log: Num | None = None
    counter_prompt_tokens: Num | None = Field(None, description="Δ of its own prompt-token counter")
    counter_cached_tokens: Num | None = None
    counter_cached_host_tokens: Num | None = None
    counter_cached_storage_tokens: Num | None = None
    hit_rate_counters: Num | None = None
    prefill_tokens: Num | None = Field(
        None,
        description="tokens it computed: `log_new_tokens`, else counter prompt − cached, else usage prompt − cached",
    )
    prefill_share: Num | None = Field(None, description="its `prefill_tokens` / the workers' sum")
    storage_hits_cross_replica: Num | None = Field(
        None,
        description="requests with L3 hits on a worker that had not served their group or session before in the point: pages another replica wrote",
    )
    storage_tokens_cross_replica: Num | None = None
    gpus: StrictStr | None = Field(
        None, description="its CUDA_VISIBLE_DEVICES (replicas.json); absent without a GPU"
    )
    busy_median_sm_clock_mhz: Num | None = Field(None, description="over its own GPUs' busy samples only")
    clock_verdict: StrictStr | None = Field(
        None,
        description="the point clock verdict on its own GPUs' samples (`ok`, `below-floor`, `thermal`, …)",
    )
    clock_reasons: list[StrictStr] = Field(default_factory=list, description="why, when not `ok`")


class Figures(Record):
    """One seed's figures (`seeds.<seed>.figures`), and the same names in `median` and `spread`.

    In `median` every number is the median over the seeds in `median_over`, every flag the or of
    theirs, and per-turn / per-position objects go key by key. Keys a server kind does not give are
    absent. Every key is declared here: harness.summarize builds these records, and a key not declared
    is an error there (a summary file read from disk keeps whatever keys it has).
    """

    requests: Num | None = Field(None, description="measured request records")
    ok: Num | None = Field(None, description="requests that finished ok")
    failures: Num | None = None
    errors: dict[str, Num] | None = Field(None, description="failures by `error_kind`")
    ttft_median_s: Num | None = Field(None, description="TTFT of ok requests, from the scheduled send time")
    ttft_p90_s: Num | None = None
    ttft_p99_s: Num | None = None
    itl_median_s: Num | None = Field(
        None, description="gaps between text-carrying stream events, pooled over ok requests"
    )
    itl_p99_s: Num | None = None
    e2e_median_s: Num | None = Field(None, description="scheduled send → done")
    duration_s: Num | None = Field(None, description="first scheduled send → last completion")
    output_tokens: Num | None = Field(None, description="usage sums over ok requests")
    prompt_tokens: Num | None = None
    output_tok_s: Num | None = Field(None, description="those sums / `duration_s`")
    latency: Latency | None = None
    throughput: Throughput | None = None
    client_late_s: Pcts | None = Field(
        None,
        description="`{p50, p99}` of the client's own lateness: sent − scheduled (`late_s`, charged to TTFT) less any wait for a free slot under the concurrency cap; `harness validate` flags a point `client-late` when p99 > max(5 ms, 5 % of the median TTFT). A closed loop has no schedule (lateness 0)",
    )
    slot_wait_s: Pcts | None = Field(
        None, description="`{p50, p99}` of the time open-loop requests waited for a free slot under the cap"
    )
    goodput: Goodput | None = Field(None, description="null without a spec `slo`")
    input_tok_s: Num | None = None
    cached_tokens: Num | None = Field(
        None,
        description="Σ usage cached tokens (null when no request reported; a null among reported values counts 0, as SGLang reports null for zero)",
    )
    hit_rate_usage: Num | None = Field(None, description="Σ cached / Σ prompt tokens of ok requests")
    miss_anatomy: MissAnatomy | None = Field(
        None, description="prompt tokens by what became of them ([miss-anatomy.md](miss-anatomy.md))"
    )
    miss_anatomy_why: StrictStr | None = Field(
        None, description="why a point has no `miss_anatomy`: the ids it sent cannot be rebuilt"
    )
    hit_rate_timings: Num | None = Field(
        None,
        description="Σ `timings.cache_n` / Σ (`cache_n` + `prompt_n`) over ok requests whose llama.cpp `server_timings` give both; null when none does",
    )
    cached_device_tokens: Num | None = Field(None, description="usage split, when the server gives it")
    cached_host_tokens: Num | None = None
    cached_storage_tokens: Num | None = Field(
        None, description="usage split: L3 storage hits (SGLang with a storage backend)"
    )
    cold_start: StrictStr | None = Field(
        None,
        description="how the point began cold: `flush`, `fresh server`, or `fresh server, empty storage directory` (servers with an L3 backend get no flush); null when it did not",
    )
    tiers_add_up_usage: StrictBool | None = Field(
        None, description="usage: device + host + storage = cached tokens (null without a split)"
    )
    tiers_add_up_counters: StrictBool | None = Field(
        None,
        description="counters: Σ `cached_tokens_total{cache_source}` = the labelled total (null without labels)",
    )
    host_tier_seconds: Num | None = Field(
        None,
        description="seconds the host hits cost to copy onto the device, summed over requests, not overlapped (the card in server_info; null without one)",
    )
    storage_tier_seconds: Num | None = Field(
        None, description="the same for L3 hits: the backend's read, then the host copy (null without L3)"
    )
    hit_rate_usage_by_turn: dict[str, Num | None] | None = Field(
        None,
        description="per `RequestRecord.turn` (0-based keys; the report prints turn 1…T); only with 2+ turns",
    )
    ttft_median_s_by_turn: dict[str, Num | None] | None = None
    per_conversation_hit_rate: dict[str, Num | None] | None = Field(
        None,
        description="the token-weighted distribution `{p10, p50, p90, conversations}` of each conversation's (`RequestRecord.session`'s) own usage hit rate; null without sessions",
    )
    hit_rate_usage_by_position: dict[str, Num | None] | None = Field(
        None, description="per `RequestRecord.position` (0 = first use of a group/session prefix)"
    )
    ttft_median_s_by_position: dict[str, Num | None] | None = None
    hit_rate_usage_by_class: dict[str, Num | None] | None = Field(
        None,
        description="per `RequestRecord.priority_class` (the spec's `priorities:`); only when records carry one",
    )
    ttft_median_s_by_class: dict[str, Num | None] | None = None
    ttft_p99_s_by_class: dict[str, Num | None] | None = None
    requests_by_class: dict[str, Num] | None = None
    hit_rate_usage_by_length: dict[str, Num | None] | None = Field(
        None,
        description="per prompt-length bucket (key: the power of two at its lower bound, `1024` = 1024–2047 prompt tokens); only with 2+ buckets",
    )
    ttft_median_s_by_length: dict[str, Num | None] | None = None
    ttft_p99_s_by_length: dict[str, Num | None] | None = None
    requests_by_length: dict[str, Num] | None = None
    hit_rate_usage_by_step_depth: dict[str, Num | None] | None = Field(
        None,
        description="an agent workload's requests per step depth (key: the exchanges its context holds, 0 = a session's first step); the `*_by_length` figures are then by context length",
    )
    ttft_median_s_by_step_depth: dict[str, Num | None] | None = None
    ttft_p99_s_by_step_depth: dict[str, Num | None] | None = None
    requests_by_step_depth: dict[str, Num] | None = None
    time_limited: StrictBool | None = Field(None, description="the point's sending was cut by `duration_s`")
    modelled: Modelled | None = Field(
        None, description="this seed's modelled figures, when the records or the log carry sim stamps"
    )
    hit_rate_log: Num | None = Field(
        None,
        description="SGLang: `#cached-token / (#cached-token + #new-token)` over the point's prefill lines (`#new-token` is page-rounded; host-tier hits count as cached); vLLM: from its `Prefix cache hit rate` lines; null when coarse",
    )
    log_slice: StrictStr | None = Field(
        None,
        description="how the log lines were tied to the point: after its own `Cache flushed successfully!` line up to the next flush line, else the wall-clock window widened by 1 s (0.1 s with millisecond stamps)",
    )
    log_coarse: StrictBool | None = Field(
        None, description="vLLM: the log's rounding moves the figure by more than 2 points"
    )
    hit_rate_log_coarse: Num | None = Field(None, description="the figure that was too coarse to compare")
    log_coarse_why: StrictStr | None = None
    hit_rate_counters: Num | None = Field(
        None,
        description="Δ`sglang:cached_tokens_total` / Δ`sglang:prompt_tokens_total` between metrics-before.prom and metrics-after.prom; vLLM: Δ(`vllm:prefix_cache_hits_total` + `vllm:external_prefix_cache_hits_total`) / Δ`vllm:prefix_cache_queries_total`",
    )
    hit_rate_counters_why: StrictStr | None = Field(
        None, description="why there is no counter figure, when there is none"
    )
    counter_engine: StrictStr | None = Field(None, description="whose counters: `sglang` or `vllm`")
    counter_prompt_tokens: Num | None = Field(None, description="Δ of the server's prompt-token counter")
    counter_cached_tokens: Num | None = Field(None, description="Δ of its cached-token counter")
    counter_cached_device_tokens: Num | None = Field(
        None, description="SGLang: Δ `sglang:cached_tokens_total{cache_source=device}`"
    )
    counter_cached_host_tokens: Num | None = Field(None, description="the same, `cache_source=host`")
    counter_cached_storage_tokens: Num | None = Field(None, description="the same, `cache_source=storage`")
    counter_cached_local_cache_hit_tokens: Num | None = Field(
        None, description="vLLM: Δ of its prompt tokens by source, `source=local_cache_hit`"
    )
    counter_cached_external_kv_transfer_tokens: Num | None = Field(
        None, description="the same, `source=external_kv_transfer`"
    )
    counter_cached_other_tokens: dict[str, Num | None] | None = Field(
        None, description="the same for any other label value, by value (absent when there is none)"
    )
    counter_evicted_tokens: Num | None = Field(None, description="Δ of the eviction counter, when exported")
    counter_load_back_tokens: Num | None = Field(
        None, description="Δ of the tokens loaded back from the host tier (vLLM: a connector's hits)"
    )
    counter_hicache_backup_tokens: Num | None = Field(None, description="Δ of HiCache's backup counter")
    counter_hicache_dropped_tokens: Num | None = Field(None, description="Δ of HiCache's dropped counter")
    counter_reset: StrictBool | None = Field(
        None, description="a counter went down or vanished (a server restart): no counter figures"
    )
    counter_reset_series: list[StrictStr] | None = Field(None, description="the series that did")
    server_ttft_mean_s: Num | None = Field(
        None, description="Δ`_sum` / Δ`_count` of the server's own TTFT histogram"
    )
    server_ttft_requests: Num | None = Field(None, description="that Δ`_count`")
    log_prefill_lines: Num | None = Field(None, description="the point's prefill lines (lowest TP rank only)")
    log_new_tokens: Num | None = Field(None, description="Σ `#new-token` over them")
    log_cached_tokens: Num | None = Field(None, description="Σ `#cached-token` over them")
    log_hit_rate_method: StrictStr | None = Field(
        None, description="vLLM: how the log figure was read from its cumulative stats lines"
    )
    log_hit_rate_uncertainty: Num | None = Field(None, description="vLLM: ± from the log's rounding")
    pool_device_tokens: Num | None = Field(None, description="the device pool logged up to the point's end")
    pool_host_tokens: Num | None = Field(None, description="HiCache's host pool logged by then")
    max_total_num_tokens: Num | None = Field(
        None, description="SGLang's `max_total_num_tokens` logged by then"
    )
    counter_prefetched_tokens: Num | None = Field(
        None, description="L3: Δ `sglang:prefetched_tokens_total` (with a storage backend)"
    )
    counter_storage_unfulfilled_below_threshold_tokens: Num | None = Field(
        None,
        description="L3: Δ `sglang:storage_prefetch_unfulfilled_tokens_total{reason=below_threshold}`; "
        "each reason's figure only when it moved",
    )
    counter_storage_unfulfilled_host_capacity_tokens: Num | None = Field(
        None, description="`reason=host_capacity`"
    )
    counter_storage_unfulfilled_device_covered_tokens: Num | None = Field(
        None, description="`reason=device_covered`"
    )
    counter_storage_unfulfilled_storage_transfer_tokens: Num | None = Field(
        None, description="`reason=storage_transfer`"
    )
    counter_storage_unfulfilled_deadline_tokens: Num | None = Field(None, description="`reason=deadline`")
    counter_storage_unfulfilled_other_tokens: dict[str, Num] | None = Field(
        None, description="any other reason that moved, by reason"
    )
    hit_rate_sources: Num | None = Field(
        None, description="how many of usage / timings / log / counters were available"
    )
    hit_rate_spread_points: Num | None = Field(
        None, description="max − min of the available hit rates, in percentage points"
    )
    hit_rate_disagree: StrictBool | None = Field(None, description="that spread exceeds 2 points")
    workers: dict[str, WorkerFigures] | None = Field(
        None,
        description="a replicas profile's workers by name (`w0`, …); the point's `hit_rate_log` and `hit_rate_counters` are then sums over them ([replicas.md](replicas.md))",
    )
    attribution: StrictStr | None = Field(
        None, description="how requests were tied to workers: smg's `x-smg-routed-worker-id` response header"
    )
    requests_unattributed: Num | None = Field(None, description="requests whose answer named no known worker")
    attribution_agrees: StrictBool | None = Field(
        None, description="every worker's prompt tokens by header equal its own prompt-token counter delta"
    )
    attribution_mismatch: StrictStr | None = Field(None, description="the workers where they differ")
    load_skew: Num | None = Field(None, description="max / mean of the workers' `prefill_tokens`")
    load_skew_worker: StrictStr | None = Field(None, description="the worker with the most prefill work")
    load_skew_note: StrictStr | None = Field(
        None, description="`load-skew: …` when `load_skew` exceeds 1.5 (shown beside the hit rate)"
    )
    storage_hits_cross_replica: Num | None = Field(
        None, description="Σ of the workers' `storage_hits_cross_replica`"
    )
    router_counters: dict[str, Num] | None = Field(
        None,
        description="the gateway's counter deltas over the point, `family{label=value,…}`: routing decisions (`smg_worker_selection_total`, `smg_cache_aware_policy_branch_total`), requests, answers by status, retries",
    )

    def number(self, name: str) -> float | None:
        """A figure chosen by name at run time (`harness compare --figures`): a number, else None."""
        v = self.get(name)
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None

    def numbers(self) -> list[str]:
        """The names of every figure that holds a number (declared or not)."""
        return [k for k in self.keys() if self.number(k) is not None]


class Telemetry(Record):
    """harness.telemetry.stats.point_stats over the samples; without telemetry.jsonl only `status`."""

    status: StrictStr | None = Field(
        None, description="why there are (no) samples: point.json's `telemetry_status`, or `absent`"
    )
    n_samples: StrictInt | None = None
    n_gpus: StrictInt | None = None
    n_busy: StrictInt | None = Field(None, description="samples with gpu_util >= 50%")
    busy_median_sm_clock_mhz: Num | None = Field(
        None, description="median SM clock over busy samples, of the governing GPU: what throughput ran at"
    )
    prefill_median_sm_clock_mhz: Num | None = Field(
        None,
        description="median SM clock over the samples taken while any request was between send and first "
        "token (the prefill window), of the GPU slowest in it: what TTFT ran at; null without request records",
    )
    n_prefill: StrictInt | None = Field(None, description="samples in the prefill window")
    max_sm_clock_mhz: Num | None = Field(None, description="the part's max SM clock")
    thermal_fraction: Num | None = Field(None, description="share of samples with a thermal throttle flag")
    hw_slowdown: StrictBool | None = None
    power_brake: StrictBool | None = None
    temp_max_c: Num | None = None
    governing_gpu: JsonValue = Field(None, description="the GPU whose busy-median clock is judged (its uuid)")
    prefill_basis: StrictStr | None = Field(None, description="what the prefill window is")
    sm_clock_min_mhz: Num | None = None
    sm_clock_max_mhz: Num | None = None
    power_cap_fraction: Num | None = None
    reasons_seen: StrictInt | None = Field(None, description="NVML throttle reasons seen, or-ed")
    power_median_w: Num | None = None
    energy_j: Num | None = None
    energy_per_output_token_j: Num | None = None
    violation_power_ns: Num | None = None
    violation_thermal_ns: Num | None = None
    per_gpu: list[JsonObject] | None = Field(None, description="the same figures per GPU")


class ClockSeries(Record):
    """The first GPU's SM clock over the point (≤ 300 samples), for the chart."""

    t_s: list[Num] = Field(default_factory=list, description="seconds since the first sample")
    sm_clock_mhz: list[Num] = Field(default_factory=list)
