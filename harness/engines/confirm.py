"""What `advise --confirm` needs of each server kind it launches candidates on (`--server-kind`): the
profile's `launch:`, whether it loads a model, where its SGLang lives, the block a trace is sent at and why,
how long a candidate takes (the estimate line), and, for an engine that is not SGLang's surface, its pool
flags, environment, block size and which candidates it can run. harness.advise (confirm, confirm_progress,
live_spec, replicas_confirm) reads this table and never the kind's name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.engines.vllm.confirm import VLLM_BLOCK, vllm_can, vllm_env, vllm_pool_args


@dataclass(frozen=True)
class Pace:
    """How long one candidate takes on a kind, for the estimate line: a start, wall seconds a request and an
    answer token sent, plus the card's modelled service time where `modelled`; `basis`: what it rests on."""

    start_s: float
    basis: str
    request_s: float = 0.0
    token_s: float = 0.0
    modelled: bool = False


# the sim's wall time per request and per answer token at time scale 0.02, fitted on this project's 2-core
# machine (a 600-request slice of the conversation trace, answers shrunk to 16/512: 2.3 ms + 1.05 ms a
# token, plus ~1 ms between requests), and a server's start with its plan and first flush
SIM_PACE = Pace(
    2.0, "the sim's measured time a request and an answer token", request_s=0.0035, token_s=0.00105
)
# SGLang on a GPU: weights loaded, CUDA graphs captured, then the card's modelled service time
GPU_PACE = Pace(90.0, "the card's modelled service time", modelled=True)
CPU_POOL = "a CPU server's KV pool is host memory, sized for short prompts"


@dataclass(frozen=True)
class ConfirmTarget:
    kind: str  # --server-kind
    launch: str = "sglang"  # the candidates' `launch:` (harness.sweep.plan resolves sglang for the kind)
    loads_model: bool = False  # needs --server-model
    served_name: bool = False  # with --server-model, the requests name the spec's model (--served-model-name)
    replicas: bool = True  # runs smg fleets (`--confirm` with `--replicas`)
    can_run: Callable[[Any], bool] | None = None  # which what-if configs it runs (None: all)
    pool_args: Callable[[int], list[str]] | None = None  # a pool of N tokens as its flags (None: SGLang's)
    env: Callable[[int, int], dict[str, str]] | None = None  # (pool, tokens per unit) -> its environment
    block: int | None = None  # its KV block: the candidates are predicted again at it
    only: str = ""  # which candidates it runs, in words (when not all)
    title: str = ""  # what the confirm's lines call it ("": its kind)
    cpu_venv: bool = (
        False  # its SGLang runs from the CPU venv unless --sglang-python says (make bench-sglang)
    )
    # a trace's hash ids are sent as advise's SHRUNK_BLOCK tokens each (False: at the trace's own block), and why
    shrunk: bool = True
    why_block: str = CPU_POOL
    pace: Pace | None = None  # how long a candidate takes (None: a CPU server's speed is not modelled)


CONFIRM_TARGETS: dict[str, ConfirmTarget] = {
    t.kind: t
    for t in (
        ConfirmTarget(
            "sim",
            served_name=True,  # the sim models --model
            title="the sim",
            why_block="every id is sent, hashed and generated on this CPU",
            pace=SIM_PACE,
        ),
        ConfirmTarget(
            "sglang",
            loads_model=True,
            shrunk=False,
            why_block="SGLang on a GPU holds full-size prompts",
            pace=GPU_PACE,
        ),
        ConfirmTarget("sglang-cpu", loads_model=True, cpu_venv=True),
        ConfirmTarget(
            "vllm",
            launch="vllm",
            loads_model=True,
            served_name=True,
            replicas=False,
            can_run=vllm_can,
            pool_args=vllm_pool_args,
            env=vllm_env,
            block=VLLM_BLOCK,
            only="vLLM: lru device pools only",
        ),
    )
}
