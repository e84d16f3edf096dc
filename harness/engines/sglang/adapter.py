"""SGLang's adapter, and the sim's (SGLang's surface, launched as `harness serve-sim`)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from harness.engines.registry import Adapter, Argv, Launch, register, runtime
from harness.metrics import SGLANG_NAMES
from harness.spec.servers import ServerProfile

SGLANG_READY_LINE = "The server is fired up and ready to roll!"
# canonical counter -> engine metric name (Prometheus text from GET metrics_path): harness.metrics
SGLANG_METRICS = SGLANG_NAMES


def _sglang_argv(p: ServerProfile, ln: Launch) -> Argv:
    if not ln.model:
        from harness.errors import HarnessError

        raise HarnessError(
            f"server {p.name}: launch: sglang needs a model (--model M or `model:` in the spec)"
        )
    argv = [sglang_python(p), "-m", "sglang.launch_server", "--model-path", ln.model]
    return argv + ["--host", ln.host, "--port", str(ln.port), *runtime(p.args, ln)]


def sglang_python(p: ServerProfile) -> str:
    """Where SGLang lives: the profile's `python:`, else $HARNESS_SGLANG_PYTHON, else the harness's own."""
    return p.python or os.environ.get("HARNESS_SGLANG_PYTHON") or sys.executable


def _sim_argv(p: ServerProfile, ln: Launch) -> Argv:
    argv = [sys.executable, "-m", "harness", "serve-sim", "--host", ln.host, "--port", str(ln.port)]
    if ln.model:
        argv += ["--model-path", ln.model]
    return argv + runtime(p.args, ln)


SGLANG = register(
    Adapter(
        name="sglang",
        argv=_sglang_argv,
        ready_line=SGLANG_READY_LINE,
        info_paths=("/get_server_info", "/server_info"),
        flush_path="/flush_cache",
        metric_names=SGLANG_METRICS,
        gateway_flush=True,
    )
)
SIM = register(
    replace(SGLANG, name="sim", argv=_sim_argv)
)  # SGLang's surface, launched as `harness serve-sim`
