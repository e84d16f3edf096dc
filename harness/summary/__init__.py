"""`summaries/<node>.json` as types: written by harness.summarize, read by report, verdicts, compare, fleet.

docs/summary.md is generated from these types (tests/helpers/summary_doc.py).
"""

from harness.summary.io import SCHEMA_VERSION, load_summary, parse_summary, schema_major, write_summary
from harness.summary.model import (
    CacheJudgement,
    ClockVerdict,
    Experiment,
    Figures,
    Pair,
    Point,
    Problem,
    Record,
    Seed,
    Server,
    Summary,
    SummaryVerdict,
    Telemetry,
)

__all__ = [
    "SCHEMA_VERSION",
    "CacheJudgement",
    "ClockVerdict",
    "Experiment",
    "Figures",
    "Pair",
    "Point",
    "Problem",
    "Record",
    "Seed",
    "Server",
    "Summary",
    "SummaryVerdict",
    "Telemetry",
    "load_summary",
    "parse_summary",
    "schema_major",
    "write_summary",
]
