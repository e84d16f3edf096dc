"""Background NVML sampler around one point: one line per GPU per tick in `telemetry.jsonl`.

Lines (all carry `kind`):
- `header` (first): t_mono, t_wall, status, interval_s, pcie_every, reasons_source, `gpus`
  (index, uuid, name, pci_bus_id, max_sm_clock_mhz, max_mem_clock_mhz, slowdown_temp_c,
  unsupported {field: reason}) and `unsupported` merged over GPUs. A null sampler writes only this.
- `sample`: t_mono, t_wall, gpu (NVML index), uuid, the FIELDS below, max_sm_clock_mhz (repeated so
  the samples alone suffice for stats), and `errors` {field: error} only when a call failed this tick.
  `pcie_tx_kbs` / `pcie_rx_kbs` appear only on every `pcie_every`-th tick (the call blocks ~20 ms).
- `note`: something changed mid-run (a field became unsupported, the sampler stopped early).
A field the part does not support is null for the whole run; a call that fails once is null in that
sample only, and sampling goes on. One extra sample is taken at stop so energy spans the whole point.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.capture import TELEMETRY, JsonlWriter
from harness.telemetry import nvml
from harness.telemetry.gpus import Gpu, ResolveError, resolve

FIELDS = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temp_c",
    "power_w",
    "power_limit_w",
    "energy_mj",
    "gpu_util",
    "mem_util",
    "mem_used_mb",
    "reasons",
    "violation_power_ns",
    "violation_thermal_ns",
)
PCIE_FIELDS = ("pcie_tx_kbs", "pcie_rx_kbs")
INIT_TIMEOUT_S = 15.0


class _Device:
    """One GPU's readers; knows which fields are unsupported and which reasons call to use."""

    def __init__(self, nv: ModuleType, gpu: Gpu) -> None:
        self.nv, self.gpu, self.h = nv, gpu, gpu.handle
        self.unsupported: dict[str, str] = {}
        self.reasons_source = "nvmlDeviceGetCurrentClocksEventReasons"
        self.max_sm = self._once(lambda: nv.nvmlDeviceGetMaxClockInfo(self.h, nv.NVML_CLOCK_SM))
        self.max_mem = self._once(lambda: nv.nvmlDeviceGetMaxClockInfo(self.h, nv.NVML_CLOCK_MEM))
        self.slowdown_temp = self._once(
            lambda: nv.nvmlDeviceGetTemperatureThreshold(self.h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        )
        self.readers: dict[tuple[str, ...], Callable[[], tuple[Any, ...]]] = {
            ("sm_clock_mhz",): lambda: (nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_SM),),
            ("mem_clock_mhz",): lambda: (nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_MEM),),
            ("temp_c",): lambda: (self._temp(),),
            ("power_w",): lambda: (nv.nvmlDeviceGetPowerUsage(self.h) / 1000.0,),
            ("power_limit_w",): lambda: (nv.nvmlDeviceGetEnforcedPowerLimit(self.h) / 1000.0,),
            ("energy_mj",): lambda: (int(nv.nvmlDeviceGetTotalEnergyConsumption(self.h)),),
            ("gpu_util", "mem_util"): self._util,
            ("mem_used_mb",): lambda: (round(nv.nvmlDeviceGetMemoryInfo(self.h).used / 2**20, 1),),
            ("reasons",): lambda: (int(self._reasons_fn()(self.h)),),
            ("violation_power_ns", "violation_thermal_ns"): self._violations,
        }
        self.pcie_readers: dict[tuple[str, ...], Callable[[], tuple[Any, ...]]] = {
            ("pcie_tx_kbs",): lambda: (nv.nvmlDeviceGetPcieThroughput(self.h, nv.NVML_PCIE_UTIL_TX_BYTES),),
            ("pcie_rx_kbs",): lambda: (nv.nvmlDeviceGetPcieThroughput(self.h, nv.NVML_PCIE_UTIL_RX_BYTES),),
        }

    def _once(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def _temp(self) -> Any:
        nv = self.nv
        fn = getattr(nv, "nvmlDeviceGetTemperatureV", None)
        if fn is not None:
            try:
                return fn(self.h, nv.NVML_TEMPERATURE_GPU)
            except Exception as e:
                if not nvml.is_error(nv, e, "FunctionNotFound"):
                    raise
        return nv.nvmlDeviceGetTemperature(self.h, nv.NVML_TEMPERATURE_GPU)

    def _util(self) -> tuple[Any, ...]:
        u = self.nv.nvmlDeviceGetUtilizationRates(self.h)
        return (int(u.gpu), int(u.memory))

    def _reasons_fn(self) -> Callable[[Any], int]:
        if self.reasons_source == "nvmlDeviceGetCurrentClocksEventReasons":
            return self.nv.nvmlDeviceGetCurrentClocksEventReasons
        return self.nv.nvmlDeviceGetCurrentClocksThrottleReasons

    def _violations(self) -> tuple[Any, ...]:
        """Cumulative perf-policy violation ns (field ids 74/75); a value the part lacks is null."""
        values = self.nv.nvmlDeviceGetFieldValues(
            self.h, [nvml.FI_PERF_POLICY_POWER, nvml.FI_PERF_POLICY_THERMAL]
        )
        out: list[Any] = []
        for v in values:
            if getattr(v, "nvmlReturn", 0) != 0:
                out.append(None)
            else:
                out.append(int(v.value.ullVal))
        return tuple(out)

    def probe(self) -> None:
        """Call every reader once: what raises NotSupported / FunctionNotFound now is null for the run."""
        nv = self.nv
        try:
            nv.nvmlDeviceGetCurrentClocksEventReasons(self.h)
        except Exception as e:
            if isinstance(e, AttributeError) or nvml.is_error(nv, e, "FunctionNotFound"):
                self.reasons_source = "nvmlDeviceGetCurrentClocksThrottleReasons"
        for names, fn in {**self.readers, **self.pcie_readers}.items():
            try:
                values = fn()
            except Exception as e:
                if nvml.is_error(nv, e, "NotSupported") or nvml.is_error(nv, e, "FunctionNotFound"):
                    for n in names:
                        self.unsupported[n] = nvml.error_name(nv, e)
                continue
            for n, v in zip(names, values, strict=True):
                if v is None and n.startswith("violation_"):
                    self.unsupported[n] = "field value not returned by this part"

    def header(self) -> dict[str, Any]:
        g = self.gpu
        return {
            "gpu": g.index,
            "uuid": g.uuid,
            "name": g.name,
            "pci_bus_id": g.pci_bus_id,
            "max_sm_clock_mhz": self.max_sm,
            "max_mem_clock_mhz": self.max_mem,
            "slowdown_temp_c": self.slowdown_temp,
            "reasons_source": self.reasons_source,
            "unsupported": dict(self.unsupported),
        }

    def sample(self, with_pcie: bool, notes: list[dict[str, Any]]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "kind": "sample",
            "t_mono": time.monotonic(),
            "t_wall": time.time(),
            "gpu": self.gpu.index,
            "uuid": self.gpu.uuid,
        }
        errors: dict[str, str] = {}
        readers = {**self.readers, **(self.pcie_readers if with_pcie else {})}
        for names, fn in readers.items():
            if all(n in self.unsupported for n in names):
                row.update(dict.fromkeys(names))
                continue
            try:
                values = fn()
            except Exception as e:
                values = (None,) * len(names)
                if nvml.is_error(self.nv, e, "NotSupported"):
                    for n in names:
                        self.unsupported[n] = "NotSupported"
                        notes.append(
                            {"kind": "note", "gpu": self.gpu.index, "field": n, "unsupported": "NotSupported"}
                        )
                else:
                    for n in names:
                        errors[n] = f"{nvml.error_name(self.nv, e)}: {e}"
            for n, v in zip(names, values, strict=True):
                row[n] = None if n in self.unsupported else v
        row["max_sm_clock_mhz"] = self.max_sm
        if errors:
            row["errors"] = errors
        return row


class Sampler:
    """What `open_sampler` yields: `.status` says "ok: N GPUs" or why there are no samples."""

    def __init__(self, path: Path, gpus: list[str] | None, interval_s: float, pcie_every: int) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.path = path
        self.status = "starting"
        self.n_samples = 0
        self.gpus: list[dict[str, Any]] = []
        self._selectors = gpus
        self._interval = interval_s
        self._pcie_every = pcie_every
        self._writer = JsonlWriter(path)
        self._closed = False
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- writing (thread-safe; the writer is closed once at exit) --
    def _write(self, obj: dict[str, Any]) -> None:
        with self._lock:
            if not self._closed:
                self._writer.write(obj)

    def _header(self, status: str, devs: list[_Device]) -> None:
        self.status = status
        self.gpus = [d.header() for d in devs]
        merged: dict[str, str] = {}
        for d in devs:
            for k, v in d.unsupported.items():
                merged.setdefault(k, v)
        self._write(
            {
                "kind": "header",
                "t_mono": time.monotonic(),
                "t_wall": time.time(),
                "status": status,
                "interval_s": self._interval,
                "pcie_every": self._pcie_every,
                "gpus": self.gpus,
                "unsupported": merged,
            }
        )

    def start_null(self, reason: str) -> None:
        self._header(reason, [])
        self._ready.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()
        if not self._ready.wait(INIT_TIMEOUT_S):
            self._stop.set()
            self.status = f"no samples: NVML did not answer within {INIT_TIMEOUT_S:.0f} s"
            self._write(
                {"kind": "header", "t_mono": time.monotonic(), "t_wall": time.time(), "status": self.status}
            )

    def _null(self, reason: str) -> None:
        if not self._stop.is_set():
            self._header(reason, [])
        self._ready.set()

    def _run(self) -> None:
        """The thread: nvmlInit here (NVML state does not survive fork), then sample until stopped."""
        nv, why = nvml.load()
        if nv is None:
            self._null(why)
            return
        init_failed = nvml.init(nv)
        if init_failed:
            self._null(init_failed)
            return
        try:
            self._sample_loop(nv)
        except Exception as e:
            if not self._ready.is_set():
                self._null(f"no samples: sampler failed at start: {e}")
            else:
                self.status += f"; sampler stopped early: {e}"
                self._write(
                    {"kind": "note", "t_mono": time.monotonic(), "stopped": f"{type(e).__name__}: {e}"}
                )
        finally:
            nvml.shutdown(nv)
            self._ready.set()

    def _sample_loop(self, nv: ModuleType) -> None:
        try:
            gpus = resolve(nv, self._selectors)
        except ResolveError as e:
            self._null(f"no GPU: {e}")
            return
        if not gpus:
            self._null("no GPU: NVML sees none")
            return
        devs = [_Device(nv, g) for g in gpus]
        for d in devs:
            d.probe()
        if self._stop.is_set():  # the caller gave up waiting
            return
        self._header(f"ok: {len(devs)} GPU{'s' if len(devs) != 1 else ''}", devs)
        self._ready.set()
        tick = 0
        next_t = time.monotonic()
        while True:
            notes: list[dict[str, Any]] = []
            pcie = self._pcie_every > 0 and tick % self._pcie_every == 0
            for d in devs:
                row = d.sample(pcie, notes)
                for n in notes:
                    n["t_mono"] = row["t_mono"]
                    self._write(n)
                notes.clear()
                self._write(row)
                self.n_samples += 1
            tick += 1
            if self._stop.is_set():
                return
            next_t += self._interval
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (GIL, slow calls): never burst to catch up
                next_t, delay = time.monotonic(), 0.0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.ident is not None:  # a start cut by a signal never ran
            self._thread.join(timeout=self._interval + INIT_TIMEOUT_S)
        with self._lock:
            self._closed = True
            self._writer.close()


def _move_aside(path: Path) -> None:
    """An earlier attempt's samples become telemetry.attempt-N.jsonl, so one file holds one run."""
    if path.exists():
        n = 1
        while path.with_name(f"telemetry.attempt-{n}.jsonl").exists():
            n += 1
        os.replace(path, path.with_name(f"telemetry.attempt-{n}.jsonl"))


@contextmanager
def open_sampler(
    point_dir: Path,
    gpus: list[str] | None = None,
    interval_s: float = 0.2,
    pcie_every: int = 25,
    null_reason: str | None = None,
) -> Iterator[Sampler]:
    """Sample the given GPUs (None = all NVML sees; see gpus.sampling_plan) into point_dir/telemetry.jsonl.

    `null_reason` (e.g. gpus.SIM_REASON) skips NVML and records that reason as the status.
    `gpus=[]` without a reason means the server uses no GPU.
    """
    _move_aside(Path(point_dir) / TELEMETRY)
    sampler = Sampler(Path(point_dir) / TELEMETRY, gpus, interval_s, pcie_every)
    try:
        if null_reason is not None:
            sampler.start_null(null_reason)
        elif gpus == []:
            sampler.start_null("no GPU: the server uses none")
        else:
            sampler.start()
        yield sampler
    finally:
        sampler.stop()
