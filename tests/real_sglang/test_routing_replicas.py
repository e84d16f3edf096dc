"""Two SGLang 0.5.23 CPU servers behind smg 1.13.0 against the routing replay (harness.whatif.fleet): the
point replayed as the gateway routed it gives each worker the hit rate SGLang's own counters measured,
every live choice is one the policy's model could make, and the model's draws over seeds hold the run."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.summarize.routing_check import check_point
from tests.helpers.cli import run_bench
from tests.helpers.procs import marked_pids, no_survivors
from tests.helpers.specs import bench_spec, shared_prefix
from tests.real_sglang.conftest import SglangSetup

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(shutil.which("smg") is None and not (Path(sys.executable).parent / "smg").exists(),
                       reason="smg (the router extra) is not installed"),
]  # fmt: skip


@pytest.fixture
def mark() -> Iterator[str]:
    m = uuid.uuid4().hex
    yield m
    for pid in marked_pids(m):
        os.kill(pid, signal.SIGKILL)


def test_two_real_sglang_replicas_behind_smg_agree_with_the_routing_replay(
    sglang_setup: SglangSetup, tmp_path: Path, mark: str
) -> None:
    # 6 groups x 3 prompts of a 192-token prefix; a 600-token worker holds two groups
    wl = shared_prefix(
        groups=6, prompts_per_group=3, system_prompt_tokens=192, question_tokens=16, output_tokens=2
    )
    server = {"name": "{policy}", "launch": "sglang", "replicas": 2, "router": {"policy": "{policy}"},
              "args": ["--max-total-tokens", "600"]}  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="rep", workload=wl, sweep={}, concurrency=1, seeds=[0],
                      api="sglang-generate", tokenizer="server", servers=[server],
                      matrix={"policy": ["round_robin", "cache_aware"]},
                      timeouts={"connect": 10, "first_token": 120, "total": 300})  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(spec), "--server-kind", "sglang-cpu", "--sglang-python",
                  str(sglang_setup.python), "--model", str(sglang_setup.model), timeout=1700)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert no_survivors(mark)
    for policy in ("round_robin", "cache_aware"):
        c = check_point(tmp_path / "capture" / "n" / "rep" / policy / "seed=0", seeds=20)
        where = f"{policy}: {c.to_dict()}"
        assert c.off_model == 0, where
        assert c.measured_hit_rate > 0.05, where  # the groups were reused at all
        for w in c.workers:
            assert w.requests > 0 and abs(w.diff_points) <= 3.0, where
        if policy == "round_robin":
            assert abs(c.diff_points) <= 3.0, where
        else:
            assert min(c.predicted) - 0.03 <= c.measured_hit_rate <= max(c.predicted) + 0.03, where
        print(where)
