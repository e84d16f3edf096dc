"""The health verdicts against a server that is not the sim: tests/helpers/fakeserver.py serving scripted
/metrics pages (tests/helpers/metrics_script.py, one page per request received), so each verdict is read from
counters the sim never wrote.

One 12-request point at concurrency 1, each request 60 ms, the timeline every 20 ms: each page is seen.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.spec import load_spec
from harness.summarize.summary import summarize
from harness.sweep.attach import run_attached
from tests.helpers import specs
from tests.helpers.metrics_script import SCRIPTS, write_script

N = 12
WORKLOAD = specs.shared_prefix(groups=2, prompts_per_group=6, system_prompt_tokens=200, question_tokens=16,
                               output_tokens=4)  # fmt: skip


def _verdicts(tmp_path: Path, fake_server_factory, verdict: str | None) -> tuple[list[str], dict]:
    path = write_script(tmp_path / "metrics-script.json", verdict, N)
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
    found, funnel = _verdicts(tmp_path, fake_server_factory, verdict)
    assert found == ([verdict] if verdict else []), (found, funnel)
    if SCRIPTS[verdict]["backup"]:  # the funnel of a host tier, from the scripted counters
        assert funnel["backed_up_tokens"] == 200 * N and funnel["returning_off_device_tokens"] >= 64, funnel
    else:
        assert funnel == {}
