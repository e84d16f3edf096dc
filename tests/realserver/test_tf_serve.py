"""`transformers serve --device cpu` with a tiny random-weight Llama, through the same `launch: command` profile
`make gpu-check` runs on cuda:0 (issue 38): launch, readiness, the OpenAI API and parsing, proven on every CI run.

It reuses the SGLang CPU venv (torch, transformers, fastapi, uvicorn, pydantic, openai) and its tiny model;
only accelerate is added, into a small cached folder (one line says so when it is installed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.announce import announce, setup_step
from tests.helpers.cli import harness
from tests.helpers.sglang_venv import sglang_cpu_env

pytestmark = [pytest.mark.slow, pytest.mark.real_server]


@pytest.fixture(scope="module")
def tf_cpu() -> tuple[Path, Path, Path, Path]:
    """(python, model folder, tokenizer.json, accelerate folder)."""
    from harness.realserver.hf_model import make_hf_model
    from harness.realserver.sglang_suite import SGLANG_SHAPE
    from harness.realserver.tf_serve import accelerate_dir, cpu_extras

    env = sglang_cpu_env("SGLang 0.5.23 CPU venv (torch + transformers for transformers serve)")
    model = make_hf_model(env.python, SGLANG_SHAPE, log=None)
    if (accelerate_dir() / "installed").is_file():
        extras = cpu_extras(env.python, log=None)
    else:
        with setup_step("accelerate for transformers serve (pip, once, ~10 s)"):
            extras = cpu_extras(env.python, log=announce)
    return env.python, model.folder, model.tokenizer, extras


def test_transformers_serve_on_the_cpu_through_a_command_profile(tmp_path: Path, tf_cpu) -> None:
    from harness.realserver.tf_serve import check_spec, serve_profile, write_spec

    python, model, tokenizer, extras = tf_cpu
    profile = serve_profile(python, model, "cpu", pythonpath=str(extras), hub_cache=tmp_path / "hub")
    (tmp_path / "hub").mkdir()
    spec = check_spec(profile, tokenizer, groups=3, prompts_per_group=3, system_prompt_tokens=96)
    path = write_spec(tmp_path / "tf-serve.yaml", spec)
    r = harness(
        "bench",
        "--node",
        "tf-cpu",
        "--spec",
        str(path),
        "--capture",
        str(tmp_path / "capture"),
        "--summaries",
        str(tmp_path / "summaries"),
        "--retries",
        "0",
        "--quiet",
        cwd=tmp_path,
        timeout=900,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    summary = json.loads((tmp_path / "summaries" / "tf-cpu.json").read_text())
    points = summary["points"]
    assert len(points) == 1
    for p, n in zip(points, (9,), strict=True):
        assert p["status"] == "ok", p["seed_status"]
        m = p["median"]
        assert m["requests"] == m["ok"] == n and not m["failures"]
        assert m["latency"]["ttft_s"]["p50"] > 0 and m["output_tokens"] == n * 8
        # the server's own usage: the exact-length prompt the tokenizer built, as the server counted it
        assert m["prompt_tokens"] >= n * (96 + 32)
        # a server started with --device cpu has no GPU whose clocks could confound it: not flagged
        assert p["verdict"]["verdict"] == "no-telemetry" and not p["verdict"]["flagged"]
    rows = [
        json.loads(line)
        for line in (
            tmp_path / "capture" / "tf-cpu" / "tf-serve" / "transformers" / "seed=0" / "requests.jsonl"
        )
        .read_text()
        .splitlines()
    ]
    measured = [x for x in rows if not x.get("warmup")]
    assert all(x["ok"] and x["finish_reason"] == "length" for x in measured)
    assert all(x["completion_tokens"] == 8 and len(x["token_mono"]) >= 1 for x in measured)
    log = (tmp_path / "capture" / "tf-cpu" / "tf-serve" / "transformers" / "server.log").read_text()
    assert 'POST /v1/chat/completions HTTP/1.1" 200' in log and "Uvicorn running on http://127.0.0.1:" in log
