"""End to end: `harness serve-sim` + `harness run` → capture → summarize → report; the three hit-rate sources agree.

Prompts that share a prefix and reach the server together land in one prefill batch and none of them
hits the cache (SGLang does the same). So each group has more prompts than the concurrency: whatever
the timing, at most CONCURRENCY of a group's prompts miss, and the hit rate has a floor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report import write_report
from harness.summarize.summary import summarize, write_summaries
from tests.helpers.procs import SimProc

pytestmark = pytest.mark.slow

CONCURRENCY = 2
PROMPTS_PER_GROUP = 6
SPEC = f"""\
name: e2e-gsp
api: openai-chat
model: default
tokenizer: word
concurrency: {CONCURRENCY}
seeds: [0, 1]
workload:
  kind: shared-prefix
  groups: 2
  prompts_per_group: {PROMPTS_PER_GROUP}
  system_prompt_tokens: 200
  question_tokens: 16
  output_tokens: 8
sweep: {{groups: [1, 3]}}
timeouts: {{connect: 5, first_token: 60, total: 120}}
"""
# the floor: per group, at least PROMPTS_PER_GROUP - CONCURRENCY prompts find the 200-token prefix cached,
# out of about 200 + 16 + the chat template's tokens each
MIN_HIT_RATE = (PROMPTS_PER_GROUP - CONCURRENCY) * 200 / (PROMPTS_PER_GROUP * 230)


def test_sim_capture_summarized_and_sources_agree(tmp_path: Path) -> None:
    spec = tmp_path / "e2e.yaml"
    spec.write_text(SPEC)
    cap = tmp_path / "capture"
    log = cap / "e2e" / "e2e-gsp" / "sim" / "server.log"
    log.parent.mkdir(parents=True)
    server = SimProc(
        tmp_path,
        "--time-scale",
        "0.02",
        "--card-profile",
        "tiny-test",
        "--enable-metrics",
        "--enable-cache-report",
        "--max-total-tokens",
        "20000",
        log_path=log,
        timeout=60.0,
    )
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "run",
                str(spec),
                "--server-url",
                server.url,
                "--server",
                "sim",
                "--node",
                "e2e",
                "--capture",
                str(cap),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert run.returncode == 0, run.stdout + run.stderr
    finally:
        server.stop()

    summaries = summarize([cap])
    s = summaries["e2e"].to_json()
    pts = s["points"]
    assert len(pts) == 2 and all(p["status"] == "ok" for p in pts)
    for p in pts:
        for seed, sd in p["seeds"].items():
            f = sd["figures"]
            rates = (f["hit_rate_usage"], f["hit_rate_log"], f["hit_rate_counters"])
            assert all(r is not None for r in rates), (p["point_key"], seed, rates)
            assert f["hit_rate_usage"] > MIN_HIT_RATE, rates
            assert f["hit_rate_disagree"] is False, (p["point_key"], seed, rates)
            assert max(rates) - min(rates) <= 0.02
            assert f["requests"] == f["ok"] == p["sweep"]["groups"] * PROMPTS_PER_GROUP
            assert f["log_prefill_lines"] >= 1
            # the sim's virtual stamps reached the records: modelled figures for every ok request
            assert f["modelled"]["requests"] == f["ok"]
            # the miss anatomy: every prompt token in one class, the usage's hits exactly, one server
            a = f["miss_anatomy"]
            classes = ("hit", "first_seen", "evicted", "elsewhere", "in_flight")
            assert sum(a[c] for c in classes) == a["prompt_tokens"] == f["prompt_tokens"], a
            assert a["hit"] == f["cached_tokens"] and a["elsewhere"] == 0 and a["first_seen"] > 0, a
        assert p["evidence"] and "Prefill batch" in p["evidence"][0]
        m = p["modelled"]
        assert m["source"] == "sim virtual clock (request stamps)"
        assert 0 < m["ttft_ms"]["p50"] <= m["ttft_ms"]["p90"] <= m["ttft_ms"]["p99"]
        assert m["tpot_ms"]["p50"] > 0 and m["output_tok_s"] > 0
    assert s["experiments"]["e2e-gsp"]["servers"]["sim"]["pool"]["device_tokens"] == 20000
    out = tmp_path / "summaries"
    write_summaries(summaries, out)
    written = write_report(json.loads((out / "e2e.json").read_text()), out, "e2e")
    md = written[0].read_text()
    (Path(os.environ["E2E_KEEP"]) / "e2e.md").write_text(md) if os.environ.get("E2E_KEEP") else None
    assert "| groups | prompt tokens to keep |" in md and "Prefill batch" in md
    assert any(p.name.endswith("-ttft.png") and p.stat().st_size > 10_000 for p in written)
