"""A capacity search's result in the summary (`experiments.<e>.servers.<s>.search`), and the typed form of
its probes; written by harness.summarize.capacity's `search_result`."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictStr

from harness.summary.record import JsonObject, Num, Record


class SearchProbe(Record):
    """One probed knob value, its figures (median over seeds) and what they meant."""

    value: Num
    status: StrictStr = Field(description="`pass`, `over` (short of the target), `saturated` or `failed`")
    goodput: Num | None = Field(None, description="fraction of scheduled requests ok within every bound")
    requests_per_s: Num | None = None
    ttft_p50_s: Num | None = None
    met: dict[str, Num] = Field(default_factory=dict, description="`{term: fraction within its bound}`")
    at_percentile: dict[str, Num] = Field(
        default_factory=dict, description="`{term: ms}` at the search's `percentile`, when it has one"
    )
    limiting: StrictStr | None = Field(None, description="the SLO term the fewest requests met")
    queue_growth: Num | None = Field(None, description="last quarter's TTFT p50 / first quarter's")
    reason: StrictStr | None = Field(None, description="why it did not pass, in words")


class SearchResult(Record):
    """The largest knob value that met the target, and every probe on the way ([capacity.md](capacity.md))."""

    knob: StrictStr = Field(description="`concurrency`, `request_rate` or `sessions`")
    best: Num | None = Field(None, description="the largest value whose probe passed; null when lo did not")
    above: Num | None = Field(
        None, description="the lowest probe that did not pass: the probe on the other side of `best`"
    )
    probes: list[SearchProbe] = Field(default_factory=list, description="every probe, by value")
    limiting: StrictStr | None = Field(None, description="the limiting SLO term at the first probe over")
    stopped: StrictStr | None = Field(None, description="why the search stopped upward, in words")
    complete: StrictBool = Field(False, description="false while probes are left to run")
    target: JsonObject = Field(default_factory=dict, description="`{slo, goodput, percentile}`")
