"""Loading NVML and naming its failures: one place decides what "no NVML" / "no GPU" means.

`pynvml` is imported lazily on every call (tests put a fake module in `sys.modules["pynvml"]`).
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any

# Clock event reason bits (nvmlClocksEventReason*), see docs/telemetry.md.
REASON_BITS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
THERMAL_MASK = 0x20 | 0x40
HW_SLOWDOWN = 0x8
POWER_BRAKE = 0x80
POWER_CAP = 0x4

FI_PERF_POLICY_POWER = 74  # cumulative ns the power policy held clocks down
FI_PERF_POLICY_THERMAL = 75  # cumulative ns the thermal policy held clocks down


def decode_reasons(mask: int | None) -> list[str]:
    """Names of the set bits, unknown bits as hex, so `harness gpu` and reports read plainly."""
    if mask is None:
        return []
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    if rest:
        names.append(hex(rest))
    return names


def load() -> tuple[ModuleType | None, str]:
    """The `pynvml` module, or None and why it cannot be imported."""
    try:
        return importlib.import_module("pynvml"), ""
    except ImportError:
        return None, "no NVML: nvidia-ml-py (pynvml) is not installed"


def error_name(nv: ModuleType | None, exc: BaseException) -> str:
    """`NotSupported`, `FunctionNotFound`, ... from an NVMLError subclass name; the type name otherwise."""
    name = type(exc).__name__
    return name.removeprefix("NVMLError_") if name.startswith("NVMLError_") else name


def is_error(nv: ModuleType, exc: BaseException, kind: str) -> bool:
    """True when `exc` is NVML's error class `NVMLError_<kind>` (e.g. NotSupported)."""
    cls = getattr(nv, f"NVMLError_{kind}", None)
    return cls is not None and isinstance(exc, cls)


def init(nv: ModuleType) -> str | None:
    """nvmlInit(); None on success, else the status line a null sampler records."""
    try:
        nv.nvmlInit()
    except Exception as e:  # any failure means no samples; say which
        if is_error(nv, e, "LibraryNotFound"):
            return "no NVML: libnvidia-ml.so.1 not found"
        if is_error(nv, e, "DriverNotLoaded"):
            return "no GPU: NVIDIA driver not loaded"
        if is_error(nv, e, "NoPermission"):
            return "no NVML: permission denied opening the NVIDIA device"
        return f"no NVML: nvmlInit failed: {e or error_name(nv, e)}"
    return None


def shutdown(nv: ModuleType) -> None:
    with contextlib.suppress(Exception):  # nothing useful to do at teardown
        nv.nvmlShutdown()


def text(value: Any) -> str:
    """NVML strings arrive as bytes in some binding versions and str in others."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)
