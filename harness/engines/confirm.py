"""What `advise --confirm` needs of each server kind it launches candidates on (`--server-kind`): the
profile's `launch:`, whether it loads a model, and, for an engine that is not SGLang's surface, its pool
flags, environment, block size and which candidates it can run. harness.advise.confirm reads this table
and never the kind's name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.engines.vllm.confirm import VLLM_BLOCK, vllm_can, vllm_env, vllm_pool_args


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


CONFIRM_TARGETS: dict[str, ConfirmTarget] = {
    t.kind: t
    for t in (
        ConfirmTarget("sim", served_name=True),  # the sim models --model
        ConfirmTarget("sglang", loads_model=True),
        ConfirmTarget("sglang-cpu", loads_model=True),
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
