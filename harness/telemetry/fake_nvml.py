"""A scripted stand-in for the `pynvml` module (nvidia-ml-py), to drive the real sampler with no GPU.

The harness never installs it by itself: tests and scripts/validate_example.py put it into sys.modules
on purpose, so it lives in the package those scripts may import (they import only `harness`).

Each query has a script key; call i of that query on a GPU returns script[key][i] (the last value
repeats). The sampler's probe makes call 0, so sample k sees index k + 1. A script value that is callable
is called at each read instead: a clock driven by the test's own state (e.g. high only during prefills). Keys in `unsupported`
raise NVMLError_NotSupported; `fail_at[key]` lists call indices that raise NVMLError_Unknown.
"""

from __future__ import annotations

import threading
import types
from dataclasses import dataclass, field
from typing import Any

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3

_CODES = {
    "Uninitialized": 1,
    "NotSupported": 3,
    "NoPermission": 4,
    "NotFound": 6,
    "DriverNotLoaded": 9,
    "LibraryNotFound": 12,
    "FunctionNotFound": 13,
    "Unknown": 999,
}
_TEXT = {
    "NotSupported": "Not Supported",
    "NoPermission": "Insufficient Permissions",
    "NotFound": "Not Found",
    "DriverNotLoaded": "Driver Not Loaded",
    "LibraryNotFound": "NVML Shared Library Not Found",
    "FunctionNotFound": "Function Not Found",
    "Uninitialized": "Uninitialized",
    "Unknown": "Unknown Error",
}

DEFAULTS: dict[str, Any] = {
    "sm": 1755,
    "mem": 2619,
    "temp": 55,
    "power_mw": 250_000,
    "limit_mw": 350_000,
    "energy_mj": 1_000_000,
    "util_gpu": 90,
    "util_mem": 40,
    "mem_used": 10 * 2**30,
    "reasons": 0,
    "viol_power": 0,
    "viol_thermal": 0,
    "pcie_tx": 1000,
    "pcie_rx": 2000,
}


@dataclass
class FakeGpu:
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    name: str = "NVIDIA Fake H100"
    pci_bus_id: str = "00000000:01:00.0"
    max_sm: int = 1980
    max_mem: int = 2619
    slowdown_temp: int = 90
    script: dict[str, Any] = field(default_factory=dict)  # key -> list of values, or a callable
    unsupported: set[str] = field(default_factory=set)
    fail_at: dict[str, set[int]] = field(default_factory=dict)
    event_reasons: bool = True  # False: the driver lacks nvmlDeviceGetCurrentClocksEventReasons
    calls: dict[str, int] = field(default_factory=dict)
    locked: tuple[int, int] | None = None
    index: int = 0


class FakeNvml(types.ModuleType):
    """The fake `pynvml`: NVML's names, plus what tests inspect (the call log, the GPUs, the init depth)."""

    log: list[tuple[str, int | None, tuple]]  # (function name, gpu index or None, args) of state changes
    gpus: list[FakeGpu]
    init_count: int
    NVMLError: type[Exception]


def make_module(
    gpus: list[FakeGpu] | None = None,
    *,
    init_error: str | None = None,
    driver: str = "560.35.03",
    can_lock: bool = True,
) -> FakeNvml:
    """A fresh fake `pynvml` module over these GPUs (default: one FakeGpu)."""
    gpus = [FakeGpu()] if gpus is None else gpus
    for i, g in enumerate(gpus):
        g.index = i
    m = FakeNvml("pynvml")
    m.__dict__.update({k: v for k, v in globals().items() if k.startswith("NVML_")})
    lock = threading.Lock()
    m.log = []
    m.gpus = gpus
    m.init_count = 0

    class NVMLError(Exception):
        def __init__(self, value: int = 999) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return _TEXT.get(type(self).__name__.removeprefix("NVMLError_"), "Unknown Error")

    m.NVMLError = NVMLError
    for name, code in _CODES.items():
        cls = type(
            f"NVMLError_{name}", (NVMLError,), {"__init__": lambda self, c=code: NVMLError.__init__(self, c)}
        )
        setattr(m, f"NVMLError_{name}", cls)

    def err(name: str) -> NVMLError:
        return getattr(m, f"NVMLError_{name}")()

    def value(g: FakeGpu, key: str) -> Any:
        with lock:
            i = g.calls.get(key, 0)
            g.calls[key] = i + 1
        if key in g.unsupported:
            raise err("NotSupported")
        if i in g.fail_at.get(key, set()):
            raise err("Unknown")
        seq = g.script.get(key)
        if callable(seq):
            return seq()
        if not seq:
            return DEFAULTS[key]
        return seq[min(i, len(seq) - 1)]

    def check() -> None:
        if m.init_count <= 0:
            raise err("Uninitialized")

    def nvmlInit() -> None:
        if init_error:
            raise err(init_error)
        m.init_count += 1

    def nvmlShutdown() -> None:
        m.init_count -= 1

    def nvmlDeviceGetCount() -> int:
        check()
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(i: int) -> FakeGpu:
        check()
        if not 0 <= i < len(gpus):
            raise err("NotFound")
        return gpus[i]

    def nvmlDeviceGetHandleByUUID(uuid: Any) -> FakeGpu:
        check()
        for g in gpus:
            if g.uuid == uuid:
                return g
        raise err("NotFound")

    def nvmlDeviceGetHandleByPciBusId(bus: Any) -> FakeGpu:
        check()
        for g in gpus:
            if g.pci_bus_id.lower() == str(bus).lower():
                return g
        raise err("NotFound")

    def nvmlDeviceGetClockInfo(g: FakeGpu, kind: int) -> int:
        return value(g, "sm" if kind == NVML_CLOCK_SM else "mem")

    def nvmlDeviceGetMaxClockInfo(g: FakeGpu, kind: int) -> int:
        if "max_sm" in g.unsupported:
            raise err("NotSupported")
        return g.max_sm if kind == NVML_CLOCK_SM else g.max_mem

    def nvmlDeviceGetCurrentClocksEventReasons(g: FakeGpu) -> int:
        if not g.event_reasons:
            raise err("FunctionNotFound")
        return value(g, "reasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(g: FakeGpu) -> int:
        return value(g, "reasons")

    def nvmlDeviceGetUtilizationRates(g: FakeGpu) -> Any:
        return types.SimpleNamespace(gpu=value(g, "util_gpu"), memory=value(g, "util_mem"))

    def nvmlDeviceGetMemoryInfo(g: FakeGpu) -> Any:
        used = value(g, "mem_used")
        return types.SimpleNamespace(used=used, total=80 * 2**30, free=80 * 2**30 - used)

    def nvmlDeviceGetFieldValues(g: FakeGpu, ids: list[int]) -> list[Any]:
        if "field_values" in g.unsupported:
            raise err("NotSupported")
        out = []
        for fid in ids:
            key = {74: "viol_power", 75: "viol_thermal"}[fid]
            try:
                v, ret = value(g, key), 0
            except NVMLError as e:
                v, ret = 0, e.value
            out.append(
                types.SimpleNamespace(
                    fieldId=fid,
                    nvmlReturn=ret,
                    valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    value=types.SimpleNamespace(ullVal=v),
                )
            )
        return out

    def nvmlDeviceSetGpuLockedClocks(g: FakeGpu, lo: int, hi: int) -> None:
        m.log.append(("nvmlDeviceSetGpuLockedClocks", g.index, (lo, hi)))
        if "lock" in g.unsupported:
            raise err("NotSupported")
        if not can_lock:
            raise err("NoPermission")
        g.locked = (lo, hi)

    def nvmlDeviceResetGpuLockedClocks(g: FakeGpu) -> None:
        m.log.append(("nvmlDeviceResetGpuLockedClocks", g.index, ()))
        if not can_lock:
            raise err("NoPermission")
        g.locked = None

    simple = {
        "nvmlDeviceGetTemperatureV": lambda g, s: value(g, "temp"),
        "nvmlDeviceGetTemperature": lambda g, s: value(g, "temp"),
        "nvmlDeviceGetTemperatureThreshold": lambda g, t: g.slowdown_temp,
        "nvmlDeviceGetPowerUsage": lambda g: value(g, "power_mw"),
        "nvmlDeviceGetEnforcedPowerLimit": lambda g: value(g, "limit_mw"),
        "nvmlDeviceGetTotalEnergyConsumption": lambda g: value(g, "energy_mj"),
        "nvmlDeviceGetPcieThroughput": lambda g, c: value(
            g, "pcie_tx" if c == NVML_PCIE_UTIL_TX_BYTES else "pcie_rx"
        ),
        "nvmlDeviceGetUUID": lambda g: g.uuid,
        "nvmlDeviceGetName": lambda g: g.name,
        "nvmlDeviceGetIndex": lambda g: g.index,
        "nvmlDeviceGetPciInfo": lambda g: types.SimpleNamespace(busId=g.pci_bus_id.encode()),
        "nvmlSystemGetDriverVersion": lambda: driver,
        "nvmlSystemGetCudaDriverVersion": lambda: 12060,
    }
    m.__dict__.update(simple)
    m.__dict__.update({k: v for k, v in locals().items() if k.startswith("nvml")})
    return m
