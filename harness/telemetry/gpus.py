"""Which physical GPUs a server uses, by UUID / PCI bus id: NVML numbering ignores CUDA_VISIBLE_DEVICES.

Selectors come from the server profile's `CUDA_VISIBLE_DEVICES` (CUDA ordinals, `GPU-<uuid>` or a
unique prefix of it, `MIG-<uuid>`) or from the caller (UUIDs or PCI bus ids like `0000:01:00.0`).
A CUDA ordinal is resolved against the GPUs sorted by PCI bus id (CUDA_DEVICE_ORDER=PCI_BUS_ID);
on a node that mixes GPU models under CUDA's default FASTEST_FIRST order, give UUIDs instead.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.telemetry import nvml

SIM_REASON = "sim server: no GPU to sample"
HIDDEN_REASON = "no GPU: CUDA_VISIBLE_DEVICES of the server hides every GPU"
CPU_REASON = "no GPU: the server runs on the CPU (--device cpu)"


class ResolveError(Exception):
    """A selector that names no GPU NVML can see."""


@dataclass
class Gpu:
    index: int  # NVML index (host-wide, not the server's CUDA ordinal)
    handle: Any
    uuid: str
    name: str
    pci_bus_id: str


def visible_selectors(env: Mapping[str, str] | None = None) -> list[str] | None:
    """Parse CUDA_VISIBLE_DEVICES as the server will see it: None = all GPUs, [] = none.

    `env` is the profile's env, laid over this process's environment (the server inherits both).
    Like CUDA, parsing stops at the first invalid entry (so `-1` hides every GPU).
    """
    merged = {**os.environ, **(env or {})}
    raw = merged.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out: list[str] = []
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit() or part.startswith(("GPU-", "MIG-")):
            out.append(part)
        else:
            break
    return out


def sampling_plan(
    no_gpu: str | None, env: Mapping[str, str] | None = None, args: Sequence[str] = ()
) -> tuple[list[str] | None, str | None]:
    """(gpus, null_reason) to pass to `open_sampler` for a server profile's env and args (a server started
    with `--device cpu`, e.g. SGLang on CPU, has no GPU whose clocks could confound it). `no_gpu`: why its
    engine never uses a GPU, whatever those say (its adapter's `no_gpu`: the sim's SIM_REASON), else None."""
    if no_gpu is not None:
        return [], no_gpu
    if _device(args) == "cpu":
        return [], CPU_REASON
    selectors = visible_selectors(env)
    if selectors == []:
        return [], HIDDEN_REASON
    return selectors, None


def _device(args: Sequence[str]) -> str | None:
    for i, a in enumerate(args):
        if a == "--device" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--device="):
            return a.split("=", 1)[1]
    return None


def _describe(nv: ModuleType, handle: Any) -> Gpu:
    try:
        index = int(nv.nvmlDeviceGetIndex(handle))
    except Exception:
        index = -1
    uuid = nvml.text(nv.nvmlDeviceGetUUID(handle))
    try:
        name = nvml.text(nv.nvmlDeviceGetName(handle))
    except Exception:
        name = "?"
    try:
        bus = nvml.text(nv.nvmlDeviceGetPciInfo(handle).busId)
    except Exception:
        bus = ""
    return Gpu(index=index, handle=handle, uuid=uuid, name=name, pci_bus_id=bus)


def all_gpus(nv: ModuleType) -> list[Gpu]:
    """Every GPU NVML sees, in NVML index order. Needs nvmlInit first."""
    return [_describe(nv, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(int(nv.nvmlDeviceGetCount()))]


def _norm_bus(bus: str) -> str:
    """`01:00.0` and `00000000:01:00.0` name the same device."""
    bus = bus.lower()
    parts = bus.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    return ":".join([parts[0].lstrip("0") or "0", *parts[1:]])


def resolve(nv: ModuleType, selectors: list[str] | None) -> list[Gpu]:
    """The GPUs a server uses (None = all), each once, in selector order. Needs nvmlInit first."""
    devices = all_gpus(nv)
    if selectors is None:
        return devices
    by_bus = sorted(devices, key=lambda g: _norm_bus(g.pci_bus_id))
    out: list[Gpu] = []
    for sel in selectors:
        gpu = _resolve_one(nv, sel, devices, by_bus)
        if all(g.uuid != gpu.uuid for g in out):
            out.append(gpu)
    return out


def _resolve_one(nv: ModuleType, sel: str, devices: list[Gpu], by_bus: list[Gpu]) -> Gpu:
    sel = sel.strip()
    if sel.isdigit():
        i = int(sel)
        if i >= len(by_bus):
            raise ResolveError(f"GPU {sel}: only {len(by_bus)} GPU(s) visible to NVML")
        return by_bus[i]
    if sel.startswith("MIG-"):
        try:
            parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nv.nvmlDeviceGetHandleByUUID(sel))
        except Exception as e:
            raise ResolveError(f"GPU {sel}: NVML cannot find this MIG device ({e})") from None
        return _describe(nv, parent)
    if sel.startswith("GPU-"):
        matches = [g for g in devices if g.uuid.startswith(sel)]
        if len(matches) != 1:
            what = "matches no GPU" if not matches else "is ambiguous"
            raise ResolveError(f"GPU {sel}: UUID {what}")
        return matches[0]
    if ":" in sel:
        for g in devices:
            if g.pci_bus_id and _norm_bus(g.pci_bus_id) == _norm_bus(sel):
                return g
        raise ResolveError(f"GPU {sel}: no GPU at this PCI bus id")
    raise ResolveError(f"GPU {sel!r}: expected a CUDA ordinal, GPU-<uuid>, MIG-<uuid> or a PCI bus id")


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:
        return {"error": f"{nvml.error_name(None, e)}: {e}"}


def _temp(nv: ModuleType, h: Any) -> Any:
    t = _try(
        getattr(nv, "nvmlDeviceGetTemperatureV", nv.nvmlDeviceGetTemperature), h, nv.NVML_TEMPERATURE_GPU
    )
    return _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU) if isinstance(t, dict) else t


def snapshot() -> dict[str, Any]:
    """What NVML sees now, for `harness gpu`: {"status", "driver", "gpus": [...]}, or why it sees nothing."""
    nv, why = nvml.load()
    if nv is None:
        return {"status": why, "gpus": []}
    init_failed = nvml.init(nv)
    if init_failed:
        return {"status": init_failed, "gpus": []}
    try:
        driver = _try(lambda: nvml.text(nv.nvmlSystemGetDriverVersion()))
        try:
            devices = all_gpus(nv)
        except Exception as e:
            return {"status": f"no GPU: listing GPUs failed: {e}", "driver": driver, "gpus": []}
        out = []
        for g in devices:
            h = g.handle
            reasons = _try(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
            if isinstance(reasons, dict):
                reasons = _try(nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
            util = _try(nv.nvmlDeviceGetUtilizationRates, h)
            power = _try(nv.nvmlDeviceGetPowerUsage, h)
            limit = _try(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            out.append(
                {
                    "gpu": g.index,
                    "name": g.name,
                    "uuid": g.uuid,
                    "pci_bus_id": g.pci_bus_id,
                    "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    "max_sm_clock_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                    "mem_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                    "temp_c": _temp(nv, h),
                    "power_w": power / 1000.0 if isinstance(power, int | float) else power,
                    "power_limit_w": limit / 1000.0 if isinstance(limit, int | float) else limit,
                    "gpu_util": util if isinstance(util, dict) else int(util.gpu),
                    "reasons": reasons,
                    "reasons_decoded": nvml.decode_reasons(reasons) if isinstance(reasons, int) else [],
                }
            )
        status = f"ok: {len(out)} GPU{'s' if len(out) != 1 else ''}" if out else "no GPU: NVML sees none"
        return {"status": status, "driver": driver, "gpus": out}
    finally:
        nvml.shutdown(nv)


def host_facts() -> dict[str, Any]:
    """CPU, GPUs, driver, Python and SGLang version: what a reader needs to trust the numbers."""
    cpu = platform.processor() or None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        sglang_version: str | None = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        sglang_version = None
    gpus: dict[str, Any]
    try:
        gpus = snapshot()
    except Exception as e:  # noqa: BLE001 - a manifest must be written even when NVML misbehaves
        gpus = {"status": f"no GPU information: {type(e).__name__}: {e}", "gpus": []}
    return {
        "cpu": {"model": cpu, "count": os.cpu_count()},
        "gpus": gpus.get("gpus", []),
        "gpu_status": gpus.get("status"),
        "driver": gpus.get("driver"),
        "sglang_version": sglang_version,
        "python": sys.version.split()[0],
    }
