"""Every verdict in one place: computed once by `harness summarize` and stored in the summary.

`clocks` (can a point's timings be trusted, do an A/B pair's clocks confound it), `cold` (did a point
begin on a cold cache), `judge` (a summary's verdicts at its own thresholds, or recomputed at others,
and the stored verdict line), `wording` (the short reason in a table cell, the verdict line). The
capture stage records raw facts only (point.json's flush fields); the report renders what is stored.
"""

from harness.verdicts.clocks import (
    EXPECTED_NO_GPU,
    PAIR_VERDICTS,
    POINT_VERDICTS,
    Thresholds,
    expected_no_gpu,
    floor_mhz,
    pair_verdicts,
    point_verdict,
)
from harness.verdicts.cold import cache_state, first_requests, worst_state
from harness.verdicts.judge import (
    client_late,
    judge,
    resolve_thresholds,
    stored_verdict,
    summary_thresholds,
    summary_verdict,
    validate_summary,
)
from harness.verdicts.wording import (
    CLOCK_PROBLEMS,
    WARM_STATES,
    short_reason,
    verdict_cell,
    verdict_line,
    verdict_word,
)

__all__ = [
    "CLOCK_PROBLEMS",
    "EXPECTED_NO_GPU",
    "PAIR_VERDICTS",
    "POINT_VERDICTS",
    "WARM_STATES",
    "Thresholds",
    "cache_state",
    "client_late",
    "expected_no_gpu",
    "first_requests",
    "judge",
    "floor_mhz",
    "pair_verdicts",
    "point_verdict",
    "resolve_thresholds",
    "short_reason",
    "stored_verdict",
    "summary_thresholds",
    "summary_verdict",
    "validate_summary",
    "verdict_cell",
    "verdict_line",
    "verdict_word",
    "worst_state",
]
