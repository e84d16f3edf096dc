"""The engines a server profile may name, with what the spec check needs of each (harness.spec.servers).

What an engine does at run time (launch line, readiness, cache reset, info and metric names, log
dialect) is its adapter's, registered under the same name in harness.engines; the two lists
are checked against each other when the adapters load. Messages name an engine by its `title`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """One engine's spec-level facts."""

    name: str
    title: str  # as messages name it
    launch: bool = False  # `launch: <name>` starts it from `args`; else only as `engine:` of a command
    ready_timeout_s: float = 300.0  # the default `ready_timeout_s` of `launch: <name>`
    model_flags: tuple[str, ...] = ()  # the flags the harness writes from `model:` (refused in `args`)
    needs_model: bool = False  # refuses to start without one (checked before any launch)
    served_name_flag: str | None = None  # the flag that names the served model after the spec's `model:`
    sglang_args: bool = False  # takes SGLang's flags (a `launch: sglang` profile run as it keeps its `args`)


REGISTRY: tuple[Engine, ...] = (
    Engine(
        "sglang",
        "SGLang",
        launch=True,
        ready_timeout_s=900.0,
        model_flags=("--model-path",),
        needs_model=True,
        served_name_flag="--served-model-name",
        sglang_args=True,
    ),
    Engine(
        "sim", "the sim", launch=True, ready_timeout_s=60.0, model_flags=("--model-path",), sglang_args=True
    ),
    # on CPU it compiles its model on first start: minutes on 2 cores
    Engine(
        "vllm",
        "vLLM",
        launch=True,
        ready_timeout_s=900.0,
        model_flags=("--model-path", "--model"),
        needs_model=True,
    ),
    Engine("llama.cpp", "llama.cpp"),
    Engine("transformers", "transformers serve"),
    Engine("generic", "a server"),
)
ENGINES: dict[str, Engine] = {e.name: e for e in REGISTRY}
ENGINE_LAUNCHES: tuple[str, ...] = tuple(e.name for e in REGISTRY if e.launch)
# `launch:` besides an engine's own: a command line of the spec's (engine `generic` unless `engine:` says),
# or a server someone else started (read as SGLang's surface unless `engine:` says)
OTHER_LAUNCHES = {"command": ("generic", 300.0), "attach": ("sglang", 30.0)}
LAUNCH_KINDS: tuple[str, ...] = (*ENGINE_LAUNCHES, *OTHER_LAUNCHES)


def default_engine(launch: str) -> str:
    """The engine a profile runs as when it names none."""
    return launch if launch in ENGINES else OTHER_LAUNCHES[launch][0]


def engine_of(launch: str) -> Engine | None:
    """The engine `launch: <name>` starts (None for command and attach)."""
    return ENGINES.get(launch) if launch in ENGINE_LAUNCHES else None


def default_ready_timeout_s(launch: str) -> float:
    return ENGINES[launch].ready_timeout_s if launch in ENGINES else OTHER_LAUNCHES[launch][1]
