"""Real SGLang 0.5.23 on CPU with HiCache (ratio 4 over a 1,200-token pool): 8 groups of 272-token prompts
return after their prefixes were evicted from the device, so the host tier serves them. The point's
/metrics timeline is scraped, the tier funnel is complete, host hits > 0, and no health verdict is raised.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.telemetry.timeline import METRICS_TIMELINE, read_timeline
from tests.helpers.cli import harness
from tests.real_sglang.conftest import REPO, RunningSglang, start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1200)]
ARGS = [
    "--max-total-tokens", "1200", "--enable-hierarchical-cache", "--hicache-ratio", "4",
    "--enable-cache-report", "--enable-metrics",
]  # fmt: skip


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory):
    yield from start_sglang("hicache", ARGS, sglang_setup, tmp_path_factory.mktemp("sglang-health"))


def test_a_working_host_tier_has_a_complete_funnel_host_hits_and_no_verdict(
    server: RunningSglang, tmp_path: Path
) -> None:
    spec = (
        (REPO / "workloads" / "sglang-cpu" / "working-set.yaml")
        .read_text()
        .replace("seeds: [0, 1, 2]", "seeds: [0]")
    )
    path = tmp_path / "ws.yaml"
    path.write_text(spec)
    capture, summaries = tmp_path / "capture", tmp_path / "summaries"
    cmd = [sys.executable, "-m", "harness", "run", str(path), "--server-url", server.url, "--server", "hicache",
           "--node", "sg", "--capture", str(capture), "--only", "groups=8", "--quiet", "--metrics-interval-s", "0.2"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    pdir = capture / "sg" / "sglang-working-set" / "hicache" / "groups=8,seed=0"
    _, samples = read_timeline(pdir / METRICS_TIMELINE)
    good = [s for s in samples if "values" in s]
    assert len(good) >= 3 and all("host_total_tokens" in s["values"] for s in good), samples[:3]
    assert any(s.get("rates", {}).get("backup_tokens", 0) > 0 for s in good), "a backup rate was seen"
    r = harness("summarize", str(capture / "sg"), "-o", str(summaries), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (p,) = json.loads((summaries / "sg.json").read_text())["points"]
    f = p["hicache_funnel"]["0"]
    for k in (
        "backed_up_tokens",
        "evicted_tokens",
        "host_hit_tokens",
        "loaded_back_tokens",
        "returning_tokens",
    ):
        assert f[k] is not None and f[k] > 0, (k, f)
    assert f["dropped_tokens"] == 0 and f["returning_off_device_tokens"] > 0, f
    assert p["health"] == [], p["health"]
    r = harness("validate", str(summaries / "sg.json"), "--json", timeout=60)
    assert json.loads(r.stdout)["health"] == []
