"""What `harness validate` reports for a summary, as records: a row per point, the pairs, the count.

`harness validate --json` prints `Validation.to_json()`; the table printer and the verdict line read
the same record. A point row is the point's clock verdict with what raised it on top (a cache that
was not cold, the load generator's own lateness) and the telemetry figures the verdict rests on.
"""

from __future__ import annotations

from pydantic import Field, JsonValue, StrictBool, StrictInt, StrictStr

from harness.summary import Pair, Record
from harness.summary.record import Num


class PointRow(Record):
    experiment: StrictStr
    server: StrictStr
    sweep: JsonValue = None
    busy_median_sm_clock_mhz: Num | None = None
    prefill_median_sm_clock_mhz: Num | None = None
    n_prefill: StrictInt | None = None
    max_sm_clock_mhz: Num | None = None
    floor_mhz: Num | None = Field(None, description="the clock floor it was judged against")
    thermal_fraction: Num | None = None
    temp_max_c: Num | None = None
    telemetry_status: StrictStr | None = None
    cache_state: StrictStr | None = None
    verdict: StrictStr
    reasons: list[StrictStr] = Field(default_factory=list)
    flagged: StrictBool
    clock_basis: StrictStr | None = Field(None, description="busy-median or prefill-window")
    client_late: StrictBool = False


class Validation(Record):
    thresholds: dict[str, Num]
    verdicts: StrictStr = Field(description="`summary` (the stored ones) or `recomputed`")
    note: StrictStr | None = Field(None, description="why they were recomputed")
    points: list[PointRow] = Field(default_factory=list)
    pairs: list[Pair] = Field(default_factory=list)
    flagged: StrictInt = 0
    ok: StrictBool = True
    line: StrictStr = ""

    @property
    def unchecked(self) -> bool:
        """Some point or pair had no telemetry: its timings could not be checked."""
        rows: list[PointRow | Pair] = [*self.points, *self.pairs]
        return any(r.verdict == "no-telemetry" for r in rows)
