"""`launch: vllm`: the launch line, its environment and settle time, profile checks, and vLLM's reset answers."""

from __future__ import annotations

import pytest

from harness.engines import Launch, adapter_for, launch_argv
from harness.engines.vllm import VLLM
from harness.errors import SpecError
from harness.servers.control import flush_cache
from harness.spec.servers import parse_servers
from tests.helpers.procs import STDLIB_CACHE_SERVER, ScriptServer


def _profile(**over):
    item = {"name": "v", "launch": "vllm", "model": "/m", "args": ["--block-size", "32"], **over}
    (p,) = parse_servers([item], None, "x.yaml", environ={})
    return p


def test_launch_line_env_and_settle(monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_VLLM_PYTHON", "/venv/bin/python")
    p = _profile(env={"VLLM_LOG_STATS_INTERVAL": "1"})
    assert adapter_for(p) is VLLM and p.engine_name == "vllm" and p.timeout_s == 900.0
    argv = launch_argv(p, Launch(port=8123, host="127.0.0.1", model="/m"))
    assert argv == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
        "--host", "127.0.0.1", "--port", "8123",
        "--enable-prefix-caching", "--enable-prompt-tokens-details", "--block-size", "32",
    ]  # fmt: skip
    assert (
        VLLM.env == {"VLLM_SERVER_DEV_MODE": "1"}
        and VLLM.reset_off_env == {"VLLM_SERVER_DEV_MODE": "0"}
        and VLLM.flush_path == "/reset_prefix_cache?reset_external=true"
    )
    assert VLLM.settle_s(p) == 2.5 and VLLM.settle_s(_profile()) == 20.5
    assert VLLM.metric_names["cached_tokens"] == "vllm:prefix_cache_hits_total"


def test_flags_the_harness_owns_are_refused() -> None:
    for flag in ("--model", "--port", "--host"):
        with pytest.raises(SpecError, match=rf"servers\[0\]\.args\[0\]: {flag} is not allowed here"):
            _profile(args=[flag, "x"])


@pytest.fixture
def vllm_like():
    server = ScriptServer(STDLIB_CACHE_SERVER, "--port", "0", "--reset", "vllm", "--refuse", "2")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.slow
def test_vllm_refusal_is_retried_and_only_its_endpoint_is_used(vllm_like) -> None:
    # /flush_cache is 404 on vLLM; {"success": false} (blocks held) is retried, not taken as a reset
    assert flush_cache(vllm_like, wait_s=0.01) == (True, "flushed after 3 tries")
    ok, note = flush_cache(vllm_like, paths=("/flush_cache",))
    assert ok is None and note == "no flush endpoint (/flush_cache HTTP 404)"


def test_matrix_expands_vllm_profiles_like_sglang_ones() -> None:
    item = {"name": "vllm-b{block}", "launch": "vllm", "model": "/m", "args": ["--block-size", "{block}"]}
    profiles = parse_servers([item], {"block": [32, 128]}, "x.yaml", environ={})
    assert [(p.name, p.args) for p in profiles] == [
        ("vllm-b32", ("--block-size", "32")),
        ("vllm-b128", ("--block-size", "128")),
    ]
