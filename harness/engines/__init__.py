"""One adapter per engine, in one registry: what SGLang, the sim, vLLM, llama.cpp, `transformers serve`
and any command differ in (launch line, readiness, reset, info and metric names, environment, the wait
for a periodic stats line), so the rest of the harness asks the adapter and never the engine's name.

Modules: `registry` (Adapter, Launch, `register`); one per engine: `sglang/` (SGLang and the sim: adapter,
log dialect), `vllm/` (adapter, CPU venv, log dialect, hit rate from its stats lines, counters, `--confirm`
facet), `llamacpp`, `generic`; and where the rest of the harness asks about engines without naming one:
`logs` (which dialect a log line is in), `log_figures` (a log read its own way), `counters` (whose
counters a scrape holds, and its figures), `facts` (block size and pool), `confirm` (advise --confirm's
server kinds). Importing the package registers every adapter.
"""

from __future__ import annotations

import dataclasses
import functools
import signal

# importing each engine's module registers its adapters (SGLang's before vLLM's: RESET_PATHS' order)
from harness.engines import generic, llamacpp, sglang, vllm  # noqa: F401
from harness.engines.registry import ADAPTERS, Adapter, Argv, Launch, attach_argv, command_argv
from harness.spec.engines import ENGINES
from harness.spec.servers import ServerProfile
from harness.telemetry.timeline import Watch

if set(ADAPTERS) != set(ENGINES):  # the spec's engine list and the adapters name the same engines
    raise ImportError(f"harness.engines: engines {sorted(ENGINES)} but adapters {sorted(ADAPTERS)}")
# a server the harness did not launch: every engine's reset endpoint in turn (the first that exists)
RESET_PATHS: tuple[str, ...] = tuple(dict.fromkeys(a.flush_path for a in ADAPTERS.values() if a.flush_path))
# what the per-point /metrics timeline keeps: every engine's names (a replicas run scrapes a gateway beside them)
TIMELINE_WATCH: Watch = functools.reduce(Watch.merged, (a.timeline for a in ADAPTERS.values()), Watch())
ATTACHED_INFO_PATHS = ("/server_info", "/get_server_info")  # SGLang 0.5.23's name first; the old one warns


def adapter_for(profile: ServerProfile) -> Adapter:
    """The adapter a profile runs with; `attach` and `command` may name their engine explicitly (a user's
    command, maybe a wrapper script, is stopped as any command is: SIGTERM to its whole group)."""
    ad = ADAPTERS[profile.engine_name]
    if profile.launch in ("command", "attach") and ad.argv is not command_argv:
        argv = command_argv if profile.launch == "command" else attach_argv
        ad = dataclasses.replace(ad, argv=argv, stop_signal=signal.SIGTERM, stop_group=True)
    return ad


def named(*names: object) -> tuple[Adapter, ...]:
    """The adapters of those names that are engines' (a profile's or a manifest's `launch` and `engine`;
    `command`, `attach` and anything else are skipped)."""
    return tuple(ADAPTERS[n] for n in names if isinstance(n, str) and n in ADAPTERS)


def no_gpu(profile: ServerProfile) -> str | None:
    """Why the profile's server never uses a GPU, where its launch or its engine says so (the sim), else None."""
    return next((a.no_gpu for a in named(profile.launch, profile.engine_name) if a.no_gpu), None)


def launch_argv(profile: ServerProfile, launch: Launch) -> Argv:
    """The exact argument list a profile runs with (never a shell string)."""
    return adapter_for(profile).argv(profile, launch)


__all__ = [
    "ADAPTERS",
    "ATTACHED_INFO_PATHS",
    "RESET_PATHS",
    "TIMELINE_WATCH",
    "Adapter",
    "Argv",
    "Launch",
    "adapter_for",
    "launch_argv",
    "named",
    "no_gpu",
]
