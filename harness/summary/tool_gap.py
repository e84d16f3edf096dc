"""What a tool gap costs (issue 59): the summary's `tool_gap` record, per point (live) or per replay
(offline, harness.whatif.tool_gap): returning requests bucketed by their gap since the conversation's
previous answer, with where their prefix was found (device, host, storage) or recomputed."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictInt, StrictStr

from harness.summary.record import Num, Record


class ToolGapRow(Record):
    """One gap bucket [gap_lo_s, gap_hi_s) and the prompt tokens of its returning requests by tier."""

    gap_lo_s: Num
    gap_hi_s: Num | None = Field(None, description="null: the open bucket above the p99 gap")
    requests: StrictInt
    prompt_tokens: StrictInt
    cached_tokens: StrictInt
    device_tokens: StrictInt | None = Field(None, description="null where the server gave no tier split")
    host_tokens: StrictInt | None = None
    storage_tokens: StrictInt | None = None
    recomputed_tokens: StrictInt = Field(description="prompt tokens not cached: prefilled again")


class ToolGap(Record):
    """Returning requests (a conversation's 2nd request on) by the gap since its previous answer, in the
    trace's seconds (the run's seconds x `speedup`), log buckets (powers of two) up to the p99 gap."""

    requests: StrictInt
    speedup: Num = Field(description="the run's gaps were the trace's / this; the table's are the trace's")
    gap_p50_s: Num
    gap_p95_s: Num
    gap_p99_s: Num
    split: StrictBool = Field(description="every cached request gave device/host/storage tokens")
    source: StrictStr = Field(description="`usage` (live: each request's cached_tokens_details) or `replay`")
    rows: list[ToolGapRow] = Field(default_factory=list)
