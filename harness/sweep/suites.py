"""Named suites: which committed specs `harness bench --suite NAME` runs."""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError

SUITES: dict[str, tuple[str, ...]] = {
    "default": (
        "working-set.yaml",
        "eviction-multiturn.yaml",
        "trace-conversation.yaml",
        "replicas-shared-prefix.yaml",  # SGLang as replicas behind smg (the `router` extra): routing x L3
        "replicas-multiturn.yaml",
        "agentic-sample.yaml",  # real agentic coding traces: agents per pool, closed loop with think time
    ),
    "smoke": ("smoke-bench.yaml",),
}


def suite_files(suite: str) -> list[Path]:
    """The suite's spec files, from ./workloads first, else the checkout's workloads/."""
    roots = [Path.cwd() / "workloads", Path(__file__).resolve().parents[2] / "workloads"]
    out = []
    for name in SUITES[suite]:
        found = next((r / name for r in roots if (r / name).is_file()), None)
        if found is None:
            raise HarnessError(f"--suite {suite}: {name} not found in {' or '.join(str(r) for r in roots)}")
        out.append(found)
    return out
