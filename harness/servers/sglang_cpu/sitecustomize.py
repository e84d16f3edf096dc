"""Import-time stand-ins that let SGLang's own server run on a CPU-only machine (no CUDA, no AVX512).

Put on PYTHONPATH by the harness for `launch: sglang` on a CPU run only (harness.servers.sglang_cpu), so
every SGLang process (launcher, tokenizer manager, spawned scheduler and detokenizer) loads it at startup.
Nothing here changes SGLang's code on disk; each stand-in says what it replaces and why this path never
reaches the real thing. A call into a replaced kernel raises naming the kernel (never a silent fallback),
and prints one `HARNESS-CPU-SHIM: kernel ... called` line the harness turns into a failed point.
Standard library and torch only: the SGLang venv has no harness installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

MARK = "HARNESS-CPU-SHIM"
# Module whose attributes are all stand-ins: with SGLANG_USE_CPU_ENGINE=1 about 100 module-level imports
# behind the CPU check pull names from sgl-kernel's CPU build, which needs AVX512 and ships no wheel. On a
# CPU without AMX the fused ops' platform key is empty, so norms, activations and RoPE take their
# forward_native paths and none of these names is ever called.
STAND_IN_ROOTS = ("sgl_kernel",)
# srt/multimodal/internvl_utils.py and the multimodal processors import torchvision at load; PyPI's
# torchvision does not load beside CPU torch, and no text-only Llama path uses it. Findable only once
# transformers has recorded torchvision as absent (it would otherwise ask the stand-in for a version).
DUMMY_ROOTS = ("torchvision",)
_DUMMIES_ON = [False]


class ReplacedKernelCalled(RuntimeError):
    """A model or flag reached a kernel that has no CPU build here: the run is not what SGLang would do."""


class StandIn:
    """A replaced name: calling it raises naming it; its attributes are stand-ins too (e.g. sgl-kernel's
    `scalar_types.uint4b8`, read at import into a table and never used on this path); usable as a base
    class, since a few modules subclass torchvision names at import."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __call__(self, *_a: Any, **_k: Any) -> Any:
        line = f"{MARK}: kernel {self._qualname} called, but it has no CPU build here (replaced at import)"
        print(line, file=sys.stderr, flush=True)
        raise ReplacedKernelCalled(line)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return StandIn(f"{self._qualname}.{attr}")

    def __mro_entries__(self, _bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __repr__(self) -> str:
        return f"<{MARK} stand-in {self._qualname}>"


class _StandInModule(types.ModuleType):
    """Every attribute is a StandIn (or a sub-module of them, for dotted imports)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []  # a package, so `import sgl_kernel.x.y` resolves through the finder
        self.__file__ = f"<{MARK} stand-in for {name}>"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        value = StandIn(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        root = fullname.partition(".")[0]
        if root in STAND_IN_ROOTS or (root in DUMMY_ROOTS and _DUMMIES_ON[0]):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StandInModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


# ------------------------------------------------------------------ HiCache's host pool on CPU
def _no_host_register(*_a: Any, **_k: Any) -> None:
    """Stands in for pool_host.common._cuda_host_register: it pins host pages for CUDA copies through
    torch.cuda.cudart(), which asserts without CUDA; CPU tensors need no pinning."""


def transfer_kv_direct(
    src_layers: Sequence[Any], dst_layers: Sequence[Any], src_indices: Any, dst_indices: Any, page_size: int
) -> None:
    """Stands in for sgl_kernel.kvcacheio.transfer_kv_direct (HiCache --hicache-io-backend direct,
    layer_first): copy the given token rows of each layer's buffer to the same rows' places in the other
    tier. On CPU both tiers are ordinary tensors, so indexing is the whole copy."""
    if len(src_layers) != len(dst_layers):
        raise ValueError(
            f"{MARK}: transfer_kv_direct got {len(src_layers)} source and {len(dst_layers)} destination layers"
        )
    src_idx = src_indices.to(device="cpu", dtype=_long())
    dst_idx = dst_indices.to(device="cpu", dtype=_long())
    for src, dst in zip(src_layers, dst_layers, strict=True):
        dst.index_copy_(0, dst_idx, src.index_select(0, src_idx).to(dst.dtype))


def _unpinned_dummy_page(module: types.ModuleType) -> None:
    """MHATokenToKVPoolHost.get_dummy_flat_data_page allocates the staging page an L3 read lands in with
    pin_memory=True, which raises without an accelerator ("no pinned memory allocator"), so every storage
    prefetch failed (reason storage_transfer). The same zeroed page, unpinned: CPU copies need no pinning."""

    def get_dummy_flat_data_page(self: Any) -> Any:
        import torch

        shape = (2, self.layer_num, self.page_size, self.head_num, self.head_dim)
        return torch.zeros(shape, dtype=self.dtype, device=self.device).flatten()

    module.MHATokenToKVPoolHost.get_dummy_flat_data_page = get_dummy_flat_data_page


def _long() -> Any:
    import torch

    return torch.int64


def _after_transformers_checks(module: types.ModuleType) -> None:
    """transformers caches "torchvision is not installed" on first ask: ask now, then let the dummies in."""
    for check in ("is_torchvision_available", "is_torchvision_v2_available"):
        fn = getattr(module, check, None)
        if callable(fn):
            fn()
    _DUMMIES_ON[0] = True


AFTER_EXEC: dict[str, Callable[[types.ModuleType], None]] = {
    "transformers.utils.import_utils": _after_transformers_checks,
    "sglang.srt.mem_cache.pool_host.mha": _unpinned_dummy_page,  # L3 reads on CPU
}
PATCHES: dict[str, dict[str, Any]] = {
    "sglang.srt.mem_cache.pool_host.common": {"_cuda_host_register": _no_host_register},
    # no transfer op is bound on CPU (mha.py imports them only on CUDA/ROCm/XPU)
    "sglang.srt.mem_cache.pool_host.mha": {"transfer_kv_direct": transfer_kv_direct},
}


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """After one of PATCHES' modules executes, set its stand-ins (module globals are looked up per call)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname not in PATCHES and fullname not in AFTER_EXEC:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _StandInFinder):
                continue
            spec = getattr(finder, "find_spec", lambda *_: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchedLoader(spec.loader, PATCHES.get(fullname, {}), AFTER_EXEC.get(fullname))
                return spec
        return None


class _PatchedLoader(importlib.abc.Loader):
    def __init__(
        self, inner: Any, names: dict[str, Any], after: Callable[[types.ModuleType], None] | None
    ) -> None:
        self.inner = inner
        self.names = names
        self.after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.inner.exec_module(module)
        for name, value in self.names.items():
            setattr(module, name, value)
        if self.after is not None:
            self.after(module)


def install() -> None:
    """Idempotent; only with SGLANG_USE_CPU_ENGINE=1, the switch that puts SGLang on its CPU path."""
    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        return
    if any(isinstance(f, _StandInFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _PatchingFinder())
    sys.meta_path.insert(0, _StandInFinder())


install()
