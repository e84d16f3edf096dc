"""`locked_clocks(mhz, gpus)`: pin the SM clock for a run (needs root) and always put it back.

The reset runs in a finally: on normal exit, on exceptions, on Ctrl-C, and on SIGTERM (turned into
KeyboardInterrupt while the lock is held, when called from the main thread). A second Ctrl-C during
the reset is ignored so the card is never left locked.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from harness import signals
from harness.errors import HarnessError
from harness.telemetry import nvml
from harness.telemetry.gpus import Gpu, ResolveError, resolve


@contextmanager
def locked_clocks(mhz: int, gpus: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Lock the SM clock of the given GPUs (None = all) at `mhz`; yields the lock record for the manifest.

    Raises HarnessError (exit 2) when NVML is absent, a GPU cannot be resolved, `mhz` is outside the
    part's range, or the caller lacks root. The record's `reset` says how the reset went.
    """
    if mhz <= 0:
        raise HarnessError(f"--lock-clocks {mhz}: expected a clock in MHz > 0")
    nv, why = nvml.load()
    if nv is None:
        raise HarnessError(f"--lock-clocks {mhz}: {why}")
    init_failed = nvml.init(nv)
    if init_failed:
        raise HarnessError(f"--lock-clocks {mhz}: {init_failed}")
    locked: list[Gpu] = []
    record: dict[str, Any] = {"sm_clock_mhz": mhz, "method": "nvmlDeviceSetGpuLockedClocks", "gpus": []}
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, signals.interrupt)
    try:
        try:
            targets = resolve(nv, gpus)
        except ResolveError as e:
            raise HarnessError(f"--lock-clocks {mhz}: {e}") from None
        if not targets:
            raise HarnessError(f"--lock-clocks {mhz}: no GPU to lock")
        for g in targets:
            _check_range(nv, g, mhz)
            try:
                nv.nvmlDeviceSetGpuLockedClocks(g.handle, mhz, mhz)
            except Exception as e:
                if nvml.is_error(nv, e, "NoPermission"):
                    raise HarnessError(
                        f"--lock-clocks {mhz}: locking SM clocks needs root (NVML: {e})"
                    ) from None
                raise HarnessError(
                    f"--lock-clocks {mhz}: GPU {g.index} ({g.uuid}): NVML refused: {e}"
                ) from None
            locked.append(g)
            record["gpus"].append({"gpu": g.index, "uuid": g.uuid, "name": g.name})
        record["locked_at_wall"] = time.time()
        yield record
    finally:
        with signals.shielded(signal.SIGINT):  # a second Ctrl-C never leaves the card locked
            record["reset"] = _reset(nv, locked)
            nvml.shutdown(nv)
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _check_range(nv: Any, g: Gpu, mhz: int) -> None:
    try:
        top = nv.nvmlDeviceGetMaxClockInfo(g.handle, nv.NVML_CLOCK_SM)
    except Exception:
        return  # unknown range: let NVML judge
    if top and mhz > top:
        raise HarnessError(f"--lock-clocks {mhz}: above GPU {g.index}'s max SM clock of {top} MHz")


def _reset(nv: Any, locked: list[Gpu]) -> str:
    """Reset every GPU we locked; one failure does not stop the others. Returns "ok" or what failed."""
    failures = []
    for g in locked:
        try:
            nv.nvmlDeviceResetGpuLockedClocks(g.handle)
        except Exception as e:
            failures.append(f"GPU {g.index} ({g.uuid}): {e}")
    if not locked:
        return "nothing locked"
    if failures:
        msg = "; ".join(failures)
        with contextlib.suppress(Exception):
            print(
                f"harness: WARNING: SM clock reset failed, run `nvidia-smi -rgc` as root: {msg}",
                file=sys.stderr,
            )
        return f"failed: {msg}"
    return "ok"
