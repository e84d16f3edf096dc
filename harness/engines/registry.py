"""What an engine's adapter is, and the one registry the engines' modules fill (`register`).

Engines differ in launch line, readiness, reset, info and metric names, never in control flow: one small
adapter each (harness.engines.sglang, .vllm, .llamacpp, .generic), registered here under the names of
harness.spec.engines. harness.engines (the package) imports every engine, so ADAPTERS is whole there.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.spec.servers import ServerProfile, fill_placeholders
from harness.telemetry.timeline import Watch

Argv = list[str]


@dataclass(frozen=True)
class Launch:
    """What a launcher needs at run time: the chosen port and the model to load."""

    port: int | str  # a str only for display ("{port}")
    host: str
    model: str | None = None
    environ: dict[str, str] = field(default_factory=dict)  # for {env:NAME}


@dataclass(frozen=True)
class Marks:
    """How a recorded server is known as this engine's where its name was not recorded (the report's labels):
    any of these server_info keys, launch flags, or words inside a launch argument."""

    info_keys: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    words: tuple[str, ...] = ()


@dataclass(frozen=True)
class Adapter:
    name: str
    argv: Callable[[ServerProfile, Launch], Argv]
    ready_line: str | None = None  # a line the server prints once it serves (None: readiness by URL only)
    info_paths: tuple[str, ...] = ()  # first that answers JSON is saved as server_info.json
    flush_path: str | None = None  # POST/GET here empties the prefix cache between points
    metrics_path: str | None = "/metrics"
    metric_names: dict[str, str] = field(default_factory=dict)
    timeline: Watch = field(default_factory=Watch)  # its /metrics samples the per-point timeline keeps
    env: dict[str, str] = field(default_factory=dict)  # set for the server unless the profile sets it
    reset_off_env: dict[str, str] = field(default_factory=dict)  # turns flush_path off (a warm re-run)
    # why it never uses a GPU (telemetry's null reason: the sim's); None: its env and args say
    no_gpu: str | None = None
    time_scaled: bool = False  # paced by bench's --time-scale: its wall clock runs X times a modelled card's
    marks: Marks = field(default_factory=Marks)  # how a recorded server is known as this engine's
    default_policy: str | None = None  # the eviction policy it runs when its launch line names none
    # seconds to wait after a point's load so a periodic stats line covers its end (vLLM's log)
    settle_s: Callable[[ServerProfile], float] = lambda _p: 0.0
    stop_signal: signal.Signals = signal.SIGTERM  # what asks it to exit (then SIGKILL after a grace)
    stop_group: bool = True  # the signal goes to the whole process group; False: to its launcher only

    def health_url(self, profile: ServerProfile, base_url: str, launch: Launch | None) -> str:
        if profile.ready_url:
            values = {"port": launch.port, "host": launch.host} if launch else {}
            return fill_placeholders(profile.ready_url, values)
        return base_url + profile.health_path

    def effective_ready_line(self, profile: ServerProfile) -> str | None:
        if profile.ready_line is not None:
            return profile.ready_line or None
        return self.ready_line


# engine name -> adapter, in the order the engines' modules register (harness.engines imports them)
ADAPTERS: dict[str, Adapter] = {}


def register(adapter: Adapter) -> Adapter:
    """Add an engine's adapter under its name (once)."""
    if adapter.name in ADAPTERS:
        raise ImportError(f"harness.engines: engine {adapter.name!r} registered twice")
    ADAPTERS[adapter.name] = adapter
    return adapter


def runtime(items: tuple[str, ...], ln: Launch) -> Argv:
    """A profile's arguments with {port}, {host}, {model} and {env:NAME} filled in."""
    values = {"port": ln.port, "host": ln.host, "model": ln.model or ""}
    return [fill_placeholders(a, values, ln.environ) for a in items]


def command_argv(p: ServerProfile, ln: Launch) -> Argv:
    return runtime(p.command, ln)


def attach_argv(p: ServerProfile, ln: Launch) -> Argv:
    return []
