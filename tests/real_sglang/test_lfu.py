"""A second eviction policy against real SGLang 0.5.23: lfu on multi-turn sessions that outgrow a 900-token
pool. The sim must cache what SGLang cached request by request at concurrency 1, and lie within SGLang's
own run-to-run spread at concurrency 4.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from tests.real_sglang.agreement import cached_per_request, per_seed, real_run, sim_run, write_spec
from tests.real_sglang.conftest import RunningSglang, start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1200)]
SPREAD_SLACK = 0.03
ARGS = [
    "--radix-eviction-policy",
    "lfu",
    "--max-total-tokens",
    "900",
    "--enable-cache-report",
    "--enable-metrics",
]
MULTI = {
    "kind": "multi-turn",
    "sessions": 8,
    "turns": 4,
    "system_prompt_tokens": 64,
    "question_tokens": 16,
    "answer_tokens": 32,
}


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory):
    yield from start_sglang("lfu-900", ARGS, sglang_setup, tmp_path_factory.mktemp("sglang-lfu"))


def test_the_sim_caches_what_sglang_cached_request_by_request_at_c1(
    server: RunningSglang, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path, "agree-lfu-c1", MULTI, ARGS, [1], [0])
    real_run(server, spec, tmp_path / "real", "real")
    sim_run(spec, tmp_path / "sim", "sim")
    for seed in (0,):
        point = f"concurrency=1,seed={seed}"
        real = cached_per_request(tmp_path / "real" / "capture", "real", "agree-lfu-c1", point)
        sim = cached_per_request(tmp_path / "sim" / "capture", "sim", "agree-lfu-c1", point)
        assert sim == real and sum(real) > 0, (point, real, sim)


def test_the_sim_lies_within_sglangs_spread_at_c4(server: RunningSglang, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "agree-lfu", MULTI, ARGS, [4], [0, 1])
    reals = [
        per_seed(real_run(server, spec, tmp_path / f"real{r}", f"real{r}"), "agree-lfu") for r in range(2)
    ]
    sim = per_seed(sim_run(spec, tmp_path / "sim", "sim"), "agree-lfu")
    real_rates = [v for run in reals for v in run["concurrency=4"]]
    mid = statistics.median(sim["concurrency=4"])
    print("sim vs SGLang lfu c=4: SGLang", sorted(real_rates), "sim", sim["concurrency=4"])
    assert min(real_rates) - SPREAD_SLACK <= mid <= max(real_rates) + SPREAD_SLACK, (real_rates, sim)
