"""The flags and environment a CPU run of SGLang 0.5.23 needs, added to a `launch: sglang` profile.

Each is what SGLang needs to stay off CUDA-only paths (docs/real-sglang.md): the CPU engine switch,
torch-native attention and pytorch sampling (the defaults are CUDA kernels), no CUDA graphs, no overlap
schedule (its CUDA streams), and for HiCache the direct io backend with the layer-first layout (the
default kernel/page-first transfer op has no CPU build). A flag the profile already sets is kept.
"""

from __future__ import annotations

import os

from harness.servers.sglang_cpu import SHIM_DIR

CPU_FLAGS: tuple[tuple[str, str | None], ...] = (
    ("--device", "cpu"),
    ("--attention-backend", "torch_native"),
    ("--sampling-backend", "pytorch"),
    ("--cuda-graph-backend-decode", "disabled"),
    ("--cuda-graph-backend-prefill", "disabled"),
    ("--disable-overlap-schedule", None),
)
HICACHE_FLAGS: tuple[tuple[str, str | None], ...] = (
    ("--hicache-io-backend", "direct"),
    ("--hicache-mem-layout", "layer_first"),
)
HICACHE_SWITCHES = ("--enable-hierarchical-cache", "--enable-hicache")
CPU_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",  # without it is_cpu() is false even with --device cpu
    "HF_HUB_OFFLINE": "1",  # the tiny model is local; never reach for a hub
    "TRANSFORMERS_OFFLINE": "1",
}


def _flag_names(args: tuple[str, ...] | list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in args if a.startswith("--")}


def cpu_args(args: tuple[str, ...] | list[str]) -> list[str]:
    """The flags to append to `args` for a CPU run (none the profile already sets)."""
    have = _flag_names(args)
    wanted = list(CPU_FLAGS)
    if have & set(HICACHE_SWITCHES):
        wanted += HICACHE_FLAGS
    out: list[str] = []
    for flag, value in wanted:
        if flag not in have:
            out += [flag] if value is None else [flag, value]
    return out


def cpu_env(existing: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The profile's env plus the CPU switches and the stand-ins' folder first on PYTHONPATH."""
    environ = dict(os.environ) if environ is None else environ
    out = {**CPU_ENV, **existing}
    base = existing.get("PYTHONPATH", environ.get("PYTHONPATH", ""))
    parts = [str(SHIM_DIR), *[p for p in base.split(os.pathsep) if p and p != str(SHIM_DIR)]]
    out["PYTHONPATH"] = os.pathsep.join(parts)
    return out
