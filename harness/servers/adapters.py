"""Engines differ in launch line, readiness and metric names, never in control flow: one small adapter each."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.servers.profiles import ServerProfile, fill_placeholders

SGLANG_READY_LINE = "The server is fired up and ready to roll!"

# canonical counter -> engine metric name (Prometheus text from GET metrics_path)
SGLANG_METRICS = {
    "prompt_tokens": "sglang:prompt_tokens_total",
    "generation_tokens": "sglang:generation_tokens_total",
    "cached_tokens": "sglang:cached_tokens_total",
    "requests": "sglang:num_requests_total",
    "evicted_tokens": "sglang:evicted_tokens_total",
    "load_back_tokens": "sglang:load_back_tokens_total",
}
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
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", ln.model]
    return argv + ["--host", ln.host, "--port", str(ln.port), *_runtime(p.args, ln)]


def _sim_argv(p: ServerProfile, ln: Launch) -> Argv:
    argv = [sys.executable, "-m", "harness", "serve-sim", "--host", ln.host, "--port", str(ln.port)]
    if ln.model:
        argv += ["--model-path", ln.model]
    return argv + _runtime(p.args, ln)


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
)
SIM = Adapter(
    name="sim",
    argv=_sim_argv,
    ready_line=SGLANG_READY_LINE,
    info_paths=("/get_server_info", "/server_info"),
    flush_path="/flush_cache",
    metric_names=SGLANG_METRICS,
)
LLAMACPP = Adapter(
    name="llama.cpp",
    argv=_command_argv,
    ready_line=None,  # /health answers 503 while loading, 200 once the model serves
    info_paths=("/props",),
    flush_path=None,  # no cache reset endpoint: points are only comparable on a fresh server
    metric_names=LLAMACPP_METRICS,
)
GENERIC = Adapter(name="generic", argv=_command_argv, info_paths=("/get_server_info", "/v1/models"))

ADAPTERS: dict[str, Adapter] = {a.name: a for a in (SGLANG, SIM, LLAMACPP, GENERIC)}


def adapter_for(profile: ServerProfile) -> Adapter:
    """The adapter a profile runs with; `attach` and `command` may name their engine explicitly."""
    ad = ADAPTERS[profile.engine_name]
    if profile.launch in ("command", "attach") and ad.argv is not _command_argv:
        ad = dataclasses.replace(ad, argv=_command_argv if profile.launch == "command" else _attach_argv)
    return ad


def launch_argv(profile: ServerProfile, launch: Launch) -> Argv:
    """The exact argument list a profile runs with (never a shell string)."""
    return adapter_for(profile).argv(profile, launch)
