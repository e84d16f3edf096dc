"""The health verdicts against a server that is not the sim: tests/helpers/fakeserver.py serving scripted
/metrics pages (one page per request received), so each verdict is read from counters the sim never wrote.

One 12-request point at concurrency 1, each request 60 ms, the timeline every 20 ms: each page is seen.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.spec import load_spec
from harness.summarize.summary import summarize
from harness.sweep.bench import run_attached
from tests.helpers import specs

N = 12
WORKLOAD = specs.shared_prefix(groups=2, prompts_per_group=6, system_prompt_tokens=200, question_tokens=16,
                               output_tokens=4)  # fmt: skip


def _page(k: int, *, evicted: int, free: int, backup: int, host_hits: int = 0, load_back: int = 0) -> dict:
    """The counters after k requests: each request evicted, backed up, hit and loaded this many tokens."""
    m = {
        "sglang:max_total_num_tokens": 1000,
        "sglang:num_requests_total": k,
        "sglang:evicted_tokens_total": evicted * k,
        "sglang:load_back_tokens_total": load_back * k,
        "sglang:kv_available_tokens": free if k else 1000,
        'sglang:cached_tokens_total{cache_source="device"}': 8 * k,
    }
    if backup:  # a host tier
        m["sglang:hicache_host_total_tokens"] = 8000
        m["sglang:hicache_backup_tokens_total"] = backup * k
        m["sglang:hicache_host_used_tokens"] = backup * k
    if host_hits:
        m['sglang:cached_tokens_total{cache_source="host"}'] = host_hits * k
    return {"after_requests": k, "metrics": m}


SCRIPTS = {
    # backed up and evicted, prompts return off the device, and no host hit ever
    "host-tier-inert": {"evicted": 150, "free": 50, "backup": 200},
    # every load-back evicts 1,000 tokens and 800 of them are still free after the tick
    "evict-storm": {"evicted": 1000, "free": 800, "backup": 200, "host_hits": 200, "load_back": 200},
    # a device-only server: three quarters of each eviction still free after the tick, beyond the shortfall
    "over-eviction": {"evicted": 400, "free": 300, "backup": 0},
    # the host serves what returns; eviction matches what the allocations needed
    None: {"evicted": 150, "free": 20, "backup": 200, "host_hits": 100, "load_back": 100},
}


def _verdicts(tmp_path: Path, fake_server_factory, script: dict) -> tuple[list[str], dict]:
    path = tmp_path / "metrics-script.json"
    path.write_text(json.dumps({"pages": [_page(k, **script) for k in range(N + 1)]}))
    srv = fake_server_factory("--ttft-ms", "60", "--metrics-script", str(path))
    spec_path = specs.write_spec(tmp_path, "indep", WORKLOAD, concurrency=1, seeds=[0])
    spec = load_spec(spec_path)
    run_attached(
        spec, spec.points(), server_url=srv.url, server_name="fake", node="n", capture=tmp_path / "cap",
        seeds=None, quiet=True, gpus=None, log=lambda _m: None, metrics_interval_s=0.02,
    )  # fmt: skip
    (s,) = summarize([tmp_path / "cap" / "n"]).values()
    (pt,) = json.loads(s.model_dump_json())["points"]
    return [v["verdict"] for v in pt["health"]], (pt.get("hicache_funnel") or {}).get("0", {})


@pytest.mark.slow
@pytest.mark.parametrize("verdict", list(SCRIPTS), ids=[str(k) for k in SCRIPTS])
def test_scripted_counters_yield_their_verdict_and_no_other(tmp_path, fake_server_factory, verdict):
    found, funnel = _verdicts(tmp_path, fake_server_factory, SCRIPTS[verdict])
    assert found == ([verdict] if verdict else []), (found, funnel)
    if SCRIPTS[verdict]["backup"]:  # the funnel of a host tier, from the scripted counters
        assert funnel["backed_up_tokens"] == 200 * N and funnel["returning_off_device_tokens"] >= 64, funnel
    else:
        assert funnel == {}
