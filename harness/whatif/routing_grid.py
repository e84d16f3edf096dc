"""The routing grid of `harness whatif --replicas`: every configuration x replica count x policy x L3 sharing.

A configuration without an L3 runs once per replicas x policy; one with an L3 (`--storage-backend`) runs
with the L3 shared by every worker, each worker's own, or both (`--l3`). Cases run across a process pool
as harness.whatif.replay.sweep runs configurations (fork: the trace is shared, not pickled per case).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.sim.timing import CardProfile
from harness.whatif.fleet import FleetResult, replay_fleet
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace
from harness.whatif.replay import ideal_hits
from harness.whatif.routing import RouterConfig

L3_MODES = ("shared", "own", "both")


@dataclass(frozen=True)
class Case:
    config: Config
    replicas: int
    router: RouterConfig
    shared_l3: bool


def build_cases(
    configs: Sequence[Config],
    replicas: Sequence[int],
    router: RouterConfig,
    policies: Sequence[str],
    l3: str = "shared",
) -> list[Case]:
    """Every case, in the order the tables list them: configuration, L3 sharing, policy, replicas."""
    if l3 not in L3_MODES:
        raise HarnessError(f"--l3: {l3!r} must be one of {', '.join(L3_MODES)}")
    for n in replicas:
        if not 1 <= n <= 64:
            raise HarnessError(f"--replicas: {n} must be within 1..64")
    sharing = {"shared": (True,), "own": (False,), "both": (True, False)}[l3]
    out: list[Case] = []
    for cfg in configs:
        for shared in sharing if cfg.storage else (False,):
            for pol in policies:
                rc = dataclasses.replace(router, policy=pol)
                out.extend(Case(cfg, n, rc, shared) for n in replicas)
    return out


_WORK: tuple[Trace, list[int], str | CardProfile | None] | None = None


def _run(case: Case) -> FleetResult:
    assert _WORK is not None, "run_cases() sets the work before the pool forks"
    trace, ideal, card = _WORK
    ideal_here = ideal if case.config.page_size == 1 else None
    return replay_fleet(trace, case.config, case.replicas, case.router, card, case.shared_l3, ideal_here)


def run_cases(
    trace: Trace,
    cases: list[Case],
    card: str | CardProfile | None = None,
    workers: int | None = None,
    ideal: list[int] | None = None,
) -> list[FleetResult]:
    """Every case, in order; `ideal`: the trace's ideal_hits at page 1 when the caller has them."""
    global _WORK
    _WORK = (trace, ideal if ideal is not None else ideal_hits(trace, 1), card)
    from harness.whatif.forked import fork_map

    return fork_map(_run, cases, workers)
