"""Records that cross stage boundaries (the capture contract). Raw facts first; derived figures later.

`requests.jsonl` holds one RequestRecord per line (dataclasses.asdict), `point.json` one PointRecord.
Times named *_mono are time.monotonic() seconds in the harness process; *_wall are Unix epoch seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

PointStatus = Literal["ok", "partial", "failed", "interrupted", "running"]

# a point's flush_note when the harness made it cold with a fresh server on an empty L3 directory instead
# of a flush (harness.sweep.cold_start); here, not in harness.verdicts.cold, so a run never imports verdicts
STORAGE_COLD_NOTE = "fresh server and an empty storage directory (a flush leaves L3 warm)"


@dataclass
class RequestRecord:
    # identity
    experiment: str
    server: str
    point: str  # point folder name, e.g. "groups=16,seed=0"
    seed: int
    index: int  # position in the schedule (0-based), stable across runs of the same seed
    group: int | None = None  # shared-prefix group
    session: int | None = None  # multi-turn session
    turn: int | None = None  # 0-based turn within the session
    position: int | None = None  # occurrence of this group/session prefix so far (0 = first)
    api: str = ""
    # clock (monotonic s) and wall start
    scheduled_mono: float = 0.0  # when the request should have been sent (TTFT starts here)
    sent_mono: float | None = None
    first_byte_mono: float | None = None  # first SSE event or first body byte of any kind
    first_token_mono: float | None = None  # first event carrying generated text
    done_mono: float | None = None
    start_wall: float = 0.0
    token_mono: list[float] = field(default_factory=list)  # arrival of every text-carrying event
    # derived at record time for convenience (re-derivable from the stamps above)
    ttft_s: float | None = None  # first_token - scheduled
    ttft_sent_s: float | None = None  # first_token - sent
    e2e_s: float | None = None  # done - scheduled
    late_s: float | None = None  # sent - scheduled (charged to TTFT): slot_wait_s + the client's own lateness
    slot_wait_s: float | None = None  # of late_s, the wait for a free slot under the concurrency cap
    tpot_s: float | None = None  # (e2e - ttft) / (completion_tokens - 1), per output token after the first
    event_tokens: list[int] | None = None  # tokens in each text event, where the server counted them
    # usage as the server reported it
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # None when the server did not say
    cached_device: int | None = None
    cached_host: int | None = None
    cached_storage: int | None = None  # SGLang's cached_tokens_details.storage (L3), when the server gives it
    num_retractions: int | None = None  # SGLang's meta_info: times retracted or preempted, then run again
    expected_prompt_tokens: int | None = None  # what the generator built, per its tokenizer
    max_tokens: int | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    ok: bool = False
    error: str | None = None
    error_kind: str | None = (
        None  # http | connect | timeout-connect | timeout-first-token | timeout-total | protocol | disconnect | truncated | cancelled
    )
    answer: str | None = None  # generated text (needed to replay multi-turn histories offline)
    # the answer's token ids as the server returned them (/generate `output_ids`): what its tree caches
    # after the prompt, and the history a `tokenizer: server` replay resends (harness.whatif.captured)
    answer_ids: list[int] | None = None
    prompt_sha: str | None = None  # sha1 of the exact prompt sent (text or token ids)
    server_timings: dict[str, Any] | None = None  # e.g. llama.cpp `timings`
    # serve-sim only: the request's stamps on the sim's virtual clock (arrival_s, first_token_s,
    # finish_s, in modelled seconds), the source of the summary's `modelled` figures
    sim_time: dict[str, Any] | None = None
    # how this request took part (a warm-up one, or one never sent) -- excluded from every figure
    warmup: bool = False  # sent before the measured requests (spec `warmup_requests`)
    not_sent: str | None = None  # None: sent; "skipped" (an earlier turn failed) | "time-limit" (duration_s)
    think_s: float | None = None  # multi-turn: the think time drawn before this turn (spec `think_time_s`)
    priority_class: str | None = None  # the spec's `priorities:` class this request's session was drawn
    # behind a gateway: the worker that served it, as smg's x-smg-routed-worker-id response header names it
    worker: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PointRecord:
    """`point.json`, written last: a point whose status is ok is never run again."""

    experiment: str
    server: str
    point: str
    seed: int
    sweep: dict[str, Any]
    status: PointStatus
    requests_scheduled: int
    requests_ok: int
    requests_failed: int
    errors: dict[str, int]  # error_kind -> count
    start_mono: float
    end_mono: float
    start_wall: float
    end_wall: float
    flushed: bool | None  # None: the server has no flush endpoint
    flush_note: str | None = None
    attempt: int = 1
    failure: str | None = None  # why the point failed (e.g. server log tail)
    telemetry_status: str | None = None  # "ok", or why there are no GPU samples
    fresh_server: bool = False  # the harness started the server for this point: nothing cached yet
    # scheduled = ok + failed + skipped + not_sent (warm-up requests are counted apart)
    requests_skipped: int = 0  # multi-turn: turns not sent because an earlier turn of the session failed
    requests_not_sent: int = 0  # not sent because duration_s ran out (the point is then time_limited)
    requests_warmup: int = 0
    time_limited: bool = False
    # behind a gateway: worker name -> the URL the gateway names it by (the records' `worker`)
    workers: dict[str, str] | None = None
    # requests in flight and no token for timeouts.stall s (harness.verdicts.health): window, count, dump
    stall: dict[str, Any] | None = None
    # the server died during the point: its exit code (a signal as -N; None when the process is not ours)
    server_died: bool = False
    server_exit_code: int | None = None
    # each load-generator process's CPU share and event-loop lag (harness.loadgen.client_load): `client-bound`
    client: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
