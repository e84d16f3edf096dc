"""A zero-latency server driven at c=256 saturates the client's loop: `client-bound`; the same run at c=8 not.

Why: the issue's done-when (issue 61 item 5). The server is benchmarks/bench_client.py's `--serve sglang` (raw
asyncio, pre-built SGLang-shaped streams, no delay) on 127.0.0.1 at a port it picks; `harness run` then
`harness summarize` as a user runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT, harness

REQUESTS = 2000


@pytest.fixture(scope="module")
def zero_latency_url() -> Iterator[str]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_client.py"), "--serve", "sglang"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _run(url: str, tmp_path: Path, concurrency: int) -> tuple[dict, dict]:
    """point.json and the summary's point of one `harness run` of REQUESTS requests at this concurrency."""
    tmp_path.mkdir()
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: zero\napi: openai-chat\nmodel: default\ntokenizer: word\n"
        f"concurrency: {concurrency}\nseeds: [0]\n"
        f"workload: {{kind: shared-prefix, groups: 100, prompts_per_group: {REQUESTS // 100},"
        " system_prompt_tokens: 32, question_tokens: 27, output_tokens: 16}\n"
        "timeouts: {connect: 10, first_token: 60, total: 120}\n"
    )
    cap, out = tmp_path / "capture", tmp_path / "summaries"
    r = harness("run", str(spec), "--server-url", url, "--node", "n", "--capture", str(cap), "--quiet")
    assert r.returncode == 0, r.stderr
    r = harness("summarize", str(cap / "n"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    (point,) = json.loads((out / "n.json").read_text())["points"]
    point_file = json.loads(Path(point["seeds"]["0"]["path"], "point.json").read_text())
    return point_file, point


@pytest.mark.slow
def test_c256_on_a_zero_latency_server_is_client_bound_and_c8_is_not(
    zero_latency_url: str, tmp_path: Path
) -> None:
    pf_hot, hot = _run(zero_latency_url, tmp_path / "c256", 256)
    pf_cool, cool = _run(zero_latency_url, tmp_path / "c8", 8)
    for pf in (pf_hot, pf_cool):
        (proc,) = pf["client"]  # one load-generator process, its figures recorded
        assert proc["requests"] == REQUESTS and proc["lag_samples"] > 0 and proc["cpu_s"] > 0
    hot_verdicts = [v for v in hot["health"] if v["verdict"] == "client-bound"]
    assert len(hot_verdicts) == 1, (pf_hot["client"], hot["health"])
    v = hot_verdicts[0]
    assert (
        v["figures"]["loop_lag_p50_s"] >= v["figures"]["own_lag_p50_s"] > v["figures"]["lag_bound_s"] >= 0.005
    )
    assert v["figures"]["busy_share"] >= 0.9 and v["evidence"] == "point-file"
    assert "free core" in v["reason"]
    assert not [v for v in cool["health"] if v["verdict"] == "client-bound"], (
        pf_cool["client"],
        cool["health"],
    )
    print("c256", pf_hot["client"], v["reason"])
    print("c8", pf_cool["client"])
