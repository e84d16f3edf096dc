"""The records of `summaries/<node>.json`, the product's main output: one type per level of the file.

pydantic v2 rather than dataclasses: a summary is read back from disk by validate, report, compare
and fleet merge, so every reader needs its shape checked with an error that names the key
(`points[3].verdict.flagged`); pydantic does that from the annotations, where dataclasses would need a
hand-written walker of the same types, and its field descriptions feed docs/summary.md
(scripts/summary_doc.py). Three choices keep the written JSON exactly what summarize wrote before
the types (tests/test_summary_model.py round-trips docs/sample/cpu-sim.json):
- numbers are `Num` (StrictInt | StrictFloat): an int stays an int, nothing is coerced from a string;
- a key never written stays absent (dumped with exclude_unset) and keys keep the order they came in;
- each level allows keys it does not declare (`extra="allow"`): figures gain keys per server kind and
  bench-real adds its own block; an older reader keeps them and writes them back.
Readers not yet migrated still reach fields by key (`Record.get`, `record["key"]`): the shim goes once
scripts/count_untyped.py counts no string-key lookup in report/.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Num = StrictInt | StrictFloat
JsonObject = dict[str, JsonValue]


class Record(BaseModel):
    """A level of the summary: typed fields, unknown keys kept, key order kept, unset keys not written."""

    model_config = ConfigDict(extra="allow", validate_assignment=False)
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        rec = handler(data)
        if isinstance(data, dict) and isinstance(rec, Record):
            rec._order = list(data)
        return rec

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if not isinstance(out, dict) or not self._order:
            return out
        first = {k: out[k] for k in self._order if k in out}
        return {**first, **{k: v for k, v in out.items() if k not in first}}

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON object as written: declared keys that were set, then the rest, in their order."""
        return self.model_dump(exclude_unset=True)  # type: ignore[return-value]

    # ------------------------------------------------ the by-key shim for readers not yet migrated

    def _has(self, key: str) -> bool:
        return key in self.model_fields_set or key in (self.__pydantic_extra__ or {})

    def __getitem__(self, key: str) -> Any:
        if not self._has(key):
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._has(key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if self._has(key) else default

    def keys(self) -> list[str]:
        return [k for k in self.to_json()]

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((k, getattr(self, k)) for k in self.keys())

    def values(self) -> Iterator[Any]:
        return (getattr(self, k) for k in self.keys())


# ---------------------------------------------------------------- figures of a point x seed (and their median)


class Pcts(Record):
    """Percentiles over a point's ok requests; null where no request gave a value."""

    p50: Num | None = None
    p90: Num | None = None
    p99: Num | None = None


class Latency(Record):
    ttft_s: Pcts = Field(default_factory=Pcts, description="time to first token, from the scheduled send")
    tpot_s: Pcts = Field(default_factory=Pcts, description="time per output token after the first")
    itl_s: Pcts = Field(default_factory=Pcts, description="inter-token latency, per output token")
    e2e_s: Pcts = Field(default_factory=Pcts, description="scheduled send to last byte")


class Throughput(Record):
    requests_per_s: Num | None = Field(None, description="ok requests over the point's span")
    output_tokens_per_s: Num | None = None


class Goodput(Record):
    fraction: Num | None = Field(None, description="ok within every SLO bound / scheduled requests")
    requests_per_s: Num | None = None
    good: Num | None = Field(None, description="requests within every bound")
    slo: dict[str, Num] = Field(default_factory=dict, description="the spec's bounds (ms)")


class Modelled(Record):
    """A sim point's figures on the modelled card, from the sim's virtual clock (never wall ÷ time scale)."""

    ttft_ms: Pcts | None = None
    tpot_ms: Pcts | None = None
    output_tok_s: Num | None = None
    requests: Num | None = None
    source: StrictStr | None = Field(None, description="request stamps, or the sim's log lines")
    wall_overhead_max: Num | None = Field(None, description="the worst overhead serve-sim warned of")
    notes: list[StrictStr] = Field(default_factory=list)


class Figures(Record):
    """One seed's figures (`seeds.<seed>.figures`), or their median over seeds (`median`).

    In `median` every number is the median over the seeds used and every flag the or of theirs;
    keys a server kind does not give (log figures of vLLM, counters without /metrics) are absent.
    """

    requests: Num | None = Field(None, description="measured requests")
    ok: Num | None = Field(None, description="requests that finished ok")
    failures: Num | None = None
    errors: dict[str, Num] | None = Field(None, description="failures by error kind")
    ttft_median_s: Num | None = None
    ttft_p90_s: Num | None = None
    ttft_p99_s: Num | None = None
    itl_median_s: Num | None = None
    itl_p99_s: Num | None = None
    e2e_median_s: Num | None = None
    duration_s: Num | None = Field(None, description="first scheduled send to last completion")
    output_tokens: Num | None = None
    prompt_tokens: Num | None = None
    output_tok_s: Num | None = None
    latency: Latency | None = None
    throughput: Throughput | None = None
    client_late_s: Pcts | None = Field(None, description="the client's own lateness (p50, p99)")
    slot_wait_s: Pcts | None = Field(None, description="wait for a free slot under the concurrency cap")
    goodput: Goodput | None = Field(None, description="null without a spec `slo`")
    input_tok_s: Num | None = None
    cached_tokens: Num | None = Field(None, description="cached prompt tokens the server reported")
    hit_rate_usage: Num | None = Field(None, description="Σ cached / Σ prompt tokens from usage")
    hit_rate_timings: Num | None = Field(None, description="from llama.cpp's server timings")
    cached_device_tokens: Num | None = None
    cached_host_tokens: Num | None = None
    hit_rate_usage_by_turn: dict[str, Num | None] | None = None
    ttft_median_s_by_turn: dict[str, Num | None] | None = None
    hit_rate_usage_by_position: dict[str, Num | None] | None = None
    ttft_median_s_by_position: dict[str, Num | None] | None = None
    time_limited: StrictBool | None = Field(None, description="duration_s cut the point short")
    modelled: Modelled | None = Field(None, description="the sim's virtual-clock figures")
    hit_rate_log: Num | None = Field(None, description="from the server log's prefill or stats lines")
    log_slice: StrictStr | None = Field(None, description="how the point's log lines were chosen")
    log_coarse: StrictBool | None = Field(None, description="vLLM: the log's rounding moves it > 2 points")
    hit_rate_log_coarse: Num | None = None
    log_coarse_why: StrictStr | None = None
    hit_rate_counters: Num | None = Field(None, description="from /metrics counter deltas")
    hit_rate_counters_why: StrictStr | None = None
    counter_engine: StrictStr | None = Field(None, description="sglang or vllm: whose counters")
    hit_rate_sources: Num | None = Field(None, description="how many hit-rate sources gave a figure")
    hit_rate_spread_points: Num | None = Field(None, description="max - min of the sources, points")
    hit_rate_disagree: StrictBool | None = Field(None, description="spread above DISAGREE_POINTS")

    def number(self, name: str) -> float | None:
        """A figure chosen by name at run time (`harness compare --figures`): a number, else None."""
        v = self.get(name)
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None

    def numbers(self) -> list[str]:
        """The names of every figure that holds a number (declared or not)."""
        return [k for k in self.keys() if self.number(k) is not None]


class Telemetry(Record):
    """NVML figures of a point (harness.telemetry.stats.point_stats), or only a status without samples."""

    status: StrictStr | None = Field(None, description="why there are (no) samples, e.g. `sim server: ...`")
    n_samples: StrictInt | None = None
    n_gpus: StrictInt | None = None
    n_busy: StrictInt | None = Field(None, description="samples with gpu_util >= 50%")
    busy_median_sm_clock_mhz: Num | None = Field(None, description="of the governing GPU")
    max_sm_clock_mhz: Num | None = None
    thermal_fraction: Num | None = None
    hw_slowdown: StrictBool | None = None
    power_brake: StrictBool | None = None
    temp_max_c: Num | None = None


class ClockSeries(Record):
    t_s: list[Num] = Field(default_factory=list, description="seconds since the first sample")
    sm_clock_mhz: list[Num] = Field(default_factory=list)


# ---------------------------------------------------------------- verdicts and the cold-cache judgement


class ClockVerdict(Record):
    """Can this point's timings be trusted (harness.verdicts.clocks)."""

    verdict: StrictStr = Field(description="ok, below-floor, thermal, hw-slowdown, power-brake, no-telemetry")
    reasons: list[StrictStr] = Field(default_factory=list)
    flagged: StrictBool = Field(description="counts against `harness validate`'s exit code")


class FirstRequestOver(Record):
    unit: StrictStr = Field(description="`group N` or `session N`")
    index: StrictInt | None = None
    cached: StrictInt
    prompt: StrictInt | None = None


class FirstRequests(Record):
    """Each group's (session's) least-cached request, held to one block on a cold cache."""

    checked: StrictInt = Field(description="groups/sessions judged")
    allowance: StrictInt = Field(description="tokens a first request may find cached")
    block_tokens: StrictInt | None = None
    over: list[FirstRequestOver] = Field(default_factory=list)
    unknown: StrictInt = Field(0, description="requests whose server did not report cached tokens")
    cold: StrictBool = True


class CacheJudgement(Record):
    """Did a seed begin on a cold cache (harness.verdicts.cold)."""

    state: StrictStr = Field(description="cold, cache-not-cold or warm-start")
    flags: dict[str, StrictStr] = Field(default_factory=dict, description="raised states and why")
    first_requests: FirstRequests | None = None


class Pair(Record):
    """Two servers of one experiment at one sweep value: do their clocks confound the comparison."""

    experiment: StrictStr
    sweep: JsonValue = None
    point_key: StrictStr | None = None
    a: StrictStr | None = None
    b: StrictStr | None = None
    clock_a_mhz: Num | None = None
    clock_b_mhz: Num | None = None
    ratio: Num | None = None
    verdict: StrictStr = Field(description="ok, clock-confounded, no-telemetry")
    reasons: list[StrictStr] = Field(default_factory=list)
    flagged: StrictBool = False


class SummaryVerdict(Record):
    """The summary's verdicts in one place (new in schema 2): what validate and the report end with."""

    line: StrictStr = Field(description="the verdict line `harness validate` and `make bench` print")
    flagged: StrictInt = Field(description="points and pairs that fail `harness validate`")
    ok: StrictBool


# ---------------------------------------------------------------- a point, its seeds, the servers


class Seed(Record):
    status: StrictStr | None = Field(None, description="ok, partial, failed, interrupted, running, missing")
    path: StrictStr | None = Field(None, description="the seed's capture folder")
    figures: Figures = Field(default_factory=Figures)
    telemetry: Telemetry = Field(default_factory=Telemetry)
    failure: JsonValue = Field(None, description="point.json's failure, when it failed")
    cache: CacheJudgement | None = None


class Point(Record):
    """One server at one sweep value: its seeds, their median and spread, and its verdicts."""

    experiment: StrictStr
    server: StrictStr
    sweep: JsonObject = Field(default_factory=dict, description="the matrix values of this point")
    point_key: StrictStr = Field("default", description="`k=v,...` of the sweep, `default` without one")
    status: StrictStr | None = Field(None, description="the worst of its seeds' statuses")
    seed_status: dict[str, StrictStr] = Field(default_factory=dict)
    median_over: StrictStr | None = Field(None, description="`ok seeds`, or `all seeds (none ok)`")
    workload_kind: StrictStr | None = None
    prompt_tokens_to_keep: StrictInt | None = Field(None, description="groups x system prompt tokens")
    seeds: dict[str, Seed] = Field(default_factory=dict)
    median: Figures = Field(default_factory=Figures)
    spread: JsonObject = Field(default_factory=dict, description="[min, max] over seeds of each figure")
    telemetry: Telemetry | None = None
    modelled: Modelled | None = None
    verdict: ClockVerdict | None = None
    clock_series: dict[str, ClockSeries] = Field(default_factory=dict, description="per seed, for the chart")
    evidence: list[StrictStr] = Field(default_factory=list, description="server log lines, verbatim")
    block_size: StrictInt | None = None
    cache_state: StrictStr | None = Field(None, description="the worst seed's cache state")
    cache_flags: dict[str, StrictStr] = Field(default_factory=dict)
    predicted_hit_rate: Num | None = Field(None, description="what-if replay on the server's settings")
    measured_hit_rate: Num | None = None
    prediction: JsonObject | None = None
    ideal_hit_rate: Num | None = None
    ideal_basis: StrictStr | None = None
    prompt_check: JsonValue = None


class CacheFacts(Record):
    block_size: StrictInt | None = None
    pool_tokens: StrictInt | None = None
    source: StrictStr | None = Field(None, description="vLLM's cache_config_info, or server_info")


class ServerLog(Record):
    path: StrictStr | None = None
    lines: StrictInt = 0
    counts: dict[str, StrictInt] = Field(default_factory=dict, description="log records by kind")
    time_shift_s: Num = Field(0.0, description="added to log stamps read in another time zone")


class Pool(Record):
    """KV pool sizes as the server's log printed them (harness.serverlog.pool_sizes)."""

    device_tokens: StrictInt | None = None
    max_total_num_tokens: StrictInt | None = None
    host_tokens: StrictInt | None = Field(None, description="HiCache's host tier")
    host_gb: Num | None = None
    kv_pools: dict[str, StrictInt] | None = None


class Server(Record):
    cache: CacheFacts = Field(default_factory=CacheFacts)
    args: JsonValue = Field(None, description="launch arguments from the manifest (a list or an object)")
    server_info: JsonValue = Field(None, description="the server's own /get_server_info (SGLang, the sim)")
    time_scale: Num | None = Field(None, description="a sim server's --time-scale")
    pool: Pool = Field(default_factory=Pool, description="pool sizes the log printed")
    log: ServerLog = Field(default_factory=ServerLog)

    def info(self) -> JsonObject:
        """server_info as an object ({} when the server gave none): the server's own keys, read by name."""
        return self.server_info if isinstance(self.server_info, dict) else {}


class Experiment(Record):
    path: StrictStr | None = Field(None, description="the experiment's capture folder")
    manifest: JsonObject = Field(default_factory=dict, description="manifest.json as the run wrote it")
    servers: dict[str, Server] = Field(default_factory=dict)


class Problem(Record):
    path: StrictStr
    reason: StrictStr


class Summary(Record):
    """`summaries/<node>.json`."""

    schema_version: StrictInt | StrictStr = Field(description="2; files of schema 1 still read")
    node: StrictStr = "?"
    generated_at: StrictStr | None = None
    generated_on: StrictStr | None = None
    harness_version: StrictStr | None = None
    sources: list[StrictStr] = Field(default_factory=list, description="the capture folders read")
    experiments: dict[str, Experiment] = Field(default_factory=dict)
    points: list[Point]
    pairs: list[Pair] = Field(default_factory=list)
    verdict_thresholds: JsonObject | None = Field(None, description="what the verdicts were judged at")
    verdict: SummaryVerdict | None = Field(None, description="new in schema 2")
    notes: list[StrictStr] = Field(default_factory=list)
    problems: list[Problem] = Field(default_factory=list, description="capture files skipped, and why")
