"""llama.cpp's llama-server, a real server nobody here wrote, holds the harness to its claims (issue 7).

The first test talks to the server directly (our own subprocess, raw httpx); the second runs the
llama-real specs through the harness's own bench path and checks the records and the summary.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from harness.realserver.model import render_chatml
from harness.workloads.tokenizers import TokenizerJson
from tests.helpers.procs import free_port, stop, wait_ready

pytestmark = [pytest.mark.real_server, pytest.mark.slow, pytest.mark.timeout(2400)]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(llama, tmp_path):
    """llama-server on a free loopback port; stopped by its own pid."""
    port = free_port()
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed below
    argv = [str(llama.binary), "-m", str(llama.gguf), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", "8192", "-np", "2", "-t", "2", "--cache-ram", "256", "--metrics"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, timeout=60.0, what="llama-server", log=tmp_path / "server.log")
        yield base
    finally:
        stop(proc, grace=15.0, group=True)
        log.close()


def _chat(base: str, messages: list[dict[str, str]], max_tokens: int = 4) -> tuple[dict, dict, int]:
    """One streamed chat request; (usage, timings, number of content events) from the final chunk."""
    body = {
        "model": "tiny",
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0,
    }
    usage, timings, events = {}, {}, 0
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            usage = obj.get("usage") or usage
            timings = obj.get("timings") or timings
            events += any((c.get("delta") or {}).get("content") for c in obj.get("choices") or [])
    return usage, timings, events


def _words(rng: random.Random, n: int) -> str:
    return " ".join(
        rng.choice(["alpha", "beta", "gamma", "delta", "omega", "sigma"]) + str(rng.randrange(100))
        for _ in range(n)
    )


def test_raw_requests_report_exact_tokens_cached_tokens_and_timings(llama, server):
    tok = TokenizerJson(llama.tokenizer)
    rng = random.Random(7)
    system = _words(rng, 300)
    first = [{"role": "system", "content": system}, {"role": "user", "content": _words(rng, 10)}]
    u1, t1, n1 = _chat(server, first)
    # our tokenizer counts what the server counts, chat template included
    assert u1["prompt_tokens"] == len(tok.encode(render_chatml(first))) + 0
    assert n1 >= 1
    for key in ("prompt_ms", "cache_n", "prompt_n", "predicted_per_second"):
        assert key in t1, t1
    assert t1["cache_n"] + t1["prompt_n"] == u1["prompt_tokens"]
    assert u1["prompt_tokens_details"]["cached_tokens"] == t1["cache_n"]

    second = [{"role": "system", "content": system}, {"role": "user", "content": _words(rng, 10)}]
    u2, t2, _ = _chat(server, second)
    shared = len(tok.encode(render_chatml(second[:1], add_generation_prompt=False)))
    assert u2["prompt_tokens_details"]["cached_tokens"] == t2["cache_n"]
    assert t2["cache_n"] >= shared - 2, (t2, shared)  # the system turn came from the cache

    cold = [{"role": "system", "content": _words(random.Random(99), 300)}, {"role": "user", "content": "hi"}]
    u3, t3, _ = _chat(server, cold)
    assert u3["prompt_tokens_details"]["cached_tokens"] == t3["cache_n"]
    assert t3["cache_n"] <= 4, t3  # at most the template's "<|im_start|>system\n" is shared


def test_harness_run_holds_against_llama_server(llama, tmp_path):
    """Tens of requests through the harness's own load generator; the checks of issue 7, item 4."""
    from harness.realserver.suite import DEFAULT_SPECS, run_real

    t0 = time.monotonic()
    run = run_real(
        [REPO / s for s in DEFAULT_SPECS],
        node="llama-test",
        capture=tmp_path / "capture",
        summaries=tmp_path / "summaries",
        log=lambda m: print(m, flush=True),
    )
    print(f"run took {time.monotonic() - t0:.1f} s; build {llama.build_seconds} s (reused {llama.reused})")
    assert run.problems == [], run.problems
    assert len(run.checks) == 2
    summary = json.loads(run.summary_path.read_text())
    real = summary["real_server"]["checks"]
    for key, c in run.checks.items():
        print(key, json.dumps(c.to_dict()))
        assert c.requests >= 20 and c.ok == c.requests == c.with_timings
        # client TTFT is never below the server's own prompt time; the gap is reported
        assert c.ttft_below_prompt_ms == []
        assert c.gap_ms_median is not None and c.gap_ms_min is not None and c.gap_ms_min >= -1.0
        assert c.ttft_sent_ms_median >= c.prompt_ms_median
        # usage and the server's own timings agree request by request and in the summary
        assert c.cached_mismatch == [] and c.prompt_mismatch == []
        assert real[key]["hit_rate_usage_summary"] == pytest.approx(c.hit_rate_timings, abs=1e-9)
        # repeated prefixes are cached, first sightings are not
        assert c.hit_rate_usage_later is not None and c.hit_rate_usage_later > 0.5, c.hit_rate_by_position
        assert c.hit_rate_usage_first is not None and c.hit_rate_usage_first < 0.1, c.hit_rate_by_position
    report = run.report_path.read_text()
    assert "## Real server checks" in report


def test_the_zero_reuse_control_reads_zero_on_llama_server(llama, server, tmp_path):
    """`salt: per-request` multi-turn sessions (every turn would otherwise resend its whole session) against
    llama-server: no request finds anything cached, by usage and by the server's own timings."""
    from harness.summarize.summary import summarize
    from tests.helpers.cli import harness
    from tests.helpers.specs import multi_turn, spec, write_yaml

    wl = multi_turn(sessions=3, turns=3, system_prompt_tokens=128, question_tokens=32, answer_tokens=8)
    raw = spec("salted", wl, api="openai-completions", model="tiny", tokenizer=str(llama.tokenizer),
               concurrency=2, seeds=[0], salt="per-request", timeouts={"connect": 10, "first_token": 60, "total": 120})  # fmt: skip
    cap = tmp_path / "capture"
    path = write_yaml(tmp_path / "salted.yaml", raw)
    r = harness("run", str(path), "--server-url", server, "--server", "llama", "--node", "n", "--capture", str(cap), "--quiet", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (p,) = summarize([cap])["n"].to_json()["points"]
    f = p["seeds"]["0"]["figures"]
    print(
        "salted on llama-server: usage",
        f["hit_rate_usage"],
        "timings",
        f["hit_rate_timings"],
        p["cache_flags"],
    )
    assert f["ok"] == 9 and f["hit_rate_usage"] == 0.0 and f["hit_rate_timings"] == 0.0
    assert "salted-hits" not in p["cache_flags"]
