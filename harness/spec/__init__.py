"""Experiment specs: YAML -> typed, validated objects, rejected with one line before anything is sent.

Every error is `SpecError(file, key.path, what was expected)`. Server profiles (`servers`, `matrix`,
`suite`) belong to harness.servers.profiles; they are kept raw here and validated there.

Modules: `experiment` (load_spec, parse_spec, ExperimentSpec and its points), `workload` (the `workload:`
mapping's three kinds), `checks` (the per-key checks). The names below are the package's public API.
"""

from harness.spec.experiment import (
    APIS,
    TOP_KEYS,
    ExperimentSpec,
    Point,
    Timeouts,
    load_spec,
    parse_spec,
    redact_headers,
)
from harness.spec.workload import (
    KINDS,
    LogNormal,
    MultiTurnWorkload,
    QuestionLength,
    SharedPrefixWorkload,
    ShareGPT,
    TraceWorkload,
    Workload,
)

__all__ = [
    "APIS",
    "KINDS",
    "TOP_KEYS",
    "ExperimentSpec",
    "LogNormal",
    "MultiTurnWorkload",
    "Point",
    "QuestionLength",
    "ShareGPT",
    "SharedPrefixWorkload",
    "Timeouts",
    "TraceWorkload",
    "Workload",
    "load_spec",
    "parse_spec",
    "redact_headers",
]
