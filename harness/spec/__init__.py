"""Experiment specs: YAML -> typed, validated objects, rejected with one line before anything is sent.

Every error is `SpecError(file, key.path, what was expected)`. Server profiles (`servers`, `matrix`,
`suite`) are validated in `servers` when a run asks (`ExperimentSpec.server_profiles()`,
`sim_settings()`): reading a spec back from a manifest never needs the launch's ${ENV} set.

Modules: `experiment` (load_spec, parse_spec, ExperimentSpec and its points), `workload` (the `workload:`
mapping's three kinds), `load` (arrival, think time, warm-up, duration, SLOs), `servers` (server profiles,
matrix, suite), `checks` (the per-key checks). The names below are the package's public API.
"""

from harness.spec.agent import AgentWorkload, SubAgents
from harness.spec.experiment import (
    APIS,
    TOP_KEYS,
    ExperimentSpec,
    Point,
    Timeouts,
    captured_spec,
    load_spec,
    parse_spec,
    point_of,
    redact_headers,
)
from harness.spec.servers import ServerProfile, SimSettings
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
    "AgentWorkload",
    "SubAgents",
    "KINDS",
    "TOP_KEYS",
    "ExperimentSpec",
    "LogNormal",
    "MultiTurnWorkload",
    "Point",
    "QuestionLength",
    "ShareGPT",
    "SharedPrefixWorkload",
    "ServerProfile",
    "SimSettings",
    "Timeouts",
    "TraceWorkload",
    "Workload",
    "captured_spec",
    "load_spec",
    "parse_spec",
    "point_of",
    "redact_headers",
]
