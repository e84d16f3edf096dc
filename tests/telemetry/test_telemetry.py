"""The NVML sampler against a scripted fake `pynvml`, per-point figures, GPU resolution and clock locking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.capture import TELEMETRY, read_jsonl
from harness.errors import HarnessError
from harness.telemetry import fake_nvml
from harness.telemetry import gpus as gpus_mod
from harness.telemetry.clocks import locked_clocks
from harness.telemetry.sampler import FIELDS, open_sampler
from harness.telemetry.stats import merge_seed_stats, point_stats
from tests.helpers.cli import harness

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch):
    """Put a fake pynvml module in sys.modules for the duration of a test."""

    def _install(*args: Any, **kw: Any):
        mod = fake_nvml.make_module(*args, **kw)
        monkeypatch.setitem(sys.modules, "pynvml", mod)
        return mod

    return _install


def _run(
    point_dir: Path, n_samples: int, timeout: float = 10.0, **kw: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Sample until at least n_samples sample lines exist (the loop decides pace, not this test)."""
    kw.setdefault("interval_s", 0.005)
    with open_sampler(point_dir, **kw) as s:
        deadline = time.monotonic() + timeout
        while s.n_samples < n_samples and time.monotonic() < deadline and s.status.startswith("ok"):
            time.sleep(0.005)
    rows, bad = read_jsonl(point_dir / TELEMETRY)
    assert bad == 0
    return s, rows


def _samples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == "sample"]


def test_sampler_scripted_values_nulls_fallback_and_mid_run_failure(tmp_path: Path, install) -> None:
    sm = [1980, 465, 480, 500, 765, 1200, 1400, 1500]
    temps = [40, 60, 61, 62, 63, 64, 65, 66]
    reasons = [0, 0x20, 0x20, 0x4, 0x8, 0x8, 0, 0x80]
    gpu = fake_nvml.FakeGpu(
        script={
            "sm": sm,
            "temp": temps,
            "reasons": reasons,
            "energy_mj": list(range(5000, 5000 + 1000 * 20, 1000)),
        },
        unsupported={"power_mw", "mem_used", "viol_thermal"},
        event_reasons=False,  # old driver: nvmlDeviceGetCurrentClocksEventReasons -> FunctionNotFound
        fail_at={"temp": {3}, "sm": {5}},  # one-off errors mid-run (calls 3 and 5 = samples 2 and 4)
    )
    install([gpu])
    s, rows = _run(tmp_path, n_samples=10, pcie_every=4)
    assert s.status == "ok: 1 GPU"
    header, samples = rows[0], _samples(rows)
    assert header["kind"] == "header" and header["status"] == "ok: 1 GPU"
    assert header["gpus"][0]["reasons_source"] == "nvmlDeviceGetCurrentClocksThrottleReasons"
    assert header["unsupported"] == {
        "power_w": "NotSupported",
        "mem_used_mb": "NotSupported",
        "violation_thermal_ns": "field value not returned by this part",
    }
    assert len(samples) >= 10
    # unsupported: null in every sample, never called again after the probe
    assert all(r["power_w"] is None and r["mem_used_mb"] is None for r in samples)
    assert all(r["violation_thermal_ns"] is None and r["violation_power_ns"] == 0 for r in samples)
    assert gpu.calls["power_mw"] == 1
    # scripted values, in order (probe took call 0), with the one-off failures as nulls + errors
    got_sm = [r["sm_clock_mhz"] for r in samples[:7]]
    assert got_sm == [465, 480, 500, 765, None, 1400, 1500]
    assert samples[4]["errors"] == {"sm_clock_mhz": "Unknown: Unknown Error"}
    assert [r["temp_c"] for r in samples[:4]] == [60, 61, None, 63]
    assert "temp_c" in samples[2]["errors"] and "errors" not in samples[0]
    assert [r["reasons"] for r in samples[:7]] == reasons[1:8]
    # every field present in every line; stamps strictly increasing
    for r in samples:
        assert set(FIELDS) <= r.keys() and r["uuid"] == gpu.uuid and r["max_sm_clock_mhz"] == 1980
    t = [r["t_mono"] for r in samples]
    assert all(b > a for a, b in zip(t, t[1:], strict=False))
    assert all(r["t_wall"] > 1e9 for r in samples)
    # PCIe only on every 4th tick
    with_pcie = [i for i, r in enumerate(samples) if "pcie_tx_kbs" in r]
    assert with_pcie[:3] == [0, 4, 8] and samples[0]["pcie_rx_kbs"] == 2000
    # stats straight from the file
    st = point_stats(rows)
    assert st["status"] == "ok: 1 GPU" and st["n_samples"] == len(samples)
    assert st["max_sm_clock_mhz"] == 1980 and st["temp_max_c"] == 66
    assert st["energy_j"] == pytest.approx((samples[-1]["energy_mj"] - samples[0]["energy_mj"]) / 1000)


def test_field_that_turns_unsupported_mid_run_stays_null_with_a_note(tmp_path: Path, install) -> None:
    gpu = fake_nvml.FakeGpu()
    mod = install([gpu])
    orig = mod.nvmlDeviceGetUtilizationRates

    def flaky(h: Any) -> Any:
        if gpu.calls.get("util_gpu", 0) >= 3:
            raise mod.NVMLError_NotSupported()
        return orig(h)

    mod.nvmlDeviceGetUtilizationRates = flaky
    _, rows = _run(tmp_path, n_samples=6)
    samples = _samples(rows)
    notes = [r for r in rows if r["kind"] == "note"]
    assert {n["field"] for n in notes} == {"gpu_util", "mem_util"}
    assert [r["gpu_util"] for r in samples[:2]] == [90, 90]
    assert all(r["gpu_util"] is None and r["mem_util"] is None for r in samples[2:])
    assert all("errors" not in r for r in samples)


def test_two_gpus_selected_by_cuda_visible_devices(tmp_path: Path, install, monkeypatch) -> None:
    # NVML index order differs from PCI bus order: CUDA ordinal 0 is the lowest bus id
    a = fake_nvml.FakeGpu(uuid="GPU-aaaa-1", pci_bus_id="00000000:81:00.0", script={"sm": [1000]})
    b = fake_nvml.FakeGpu(uuid="GPU-bbbb-2", pci_bus_id="00000000:01:00.0", script={"sm": [1500]})
    c = fake_nvml.FakeGpu(uuid="GPU-cccc-3", pci_bus_id="00000000:41:00.0", script={"sm": [1700]})
    install([a, b, c])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sel, why = gpus_mod.sampling_plan(None, {"CUDA_VISIBLE_DEVICES": "0,2"})
    assert sel == ["0", "2"] and why is None
    s, rows = _run(tmp_path, n_samples=6, gpus=sel)
    assert s.status == "ok: 2 GPUs"
    assert [g["uuid"] for g in rows[0]["gpus"]] == ["GPU-bbbb-2", "GPU-aaaa-1"]
    samples = _samples(rows)
    assert {r["uuid"] for r in samples} == {"GPU-bbbb-2", "GPU-aaaa-1"}
    assert {r["gpu"] for r in samples} == {1, 0}  # NVML indices, not CUDA ordinals
    st = point_stats(rows)
    assert (
        st["n_gpus"] == 2 and st["busy_median_sm_clock_mhz"] == 1000 and st["governing_gpu"] == "GPU-aaaa-1"
    )


def test_resolve_uuid_prefix_bus_id_and_errors(install) -> None:
    a = fake_nvml.FakeGpu(uuid="GPU-aaaa-1", pci_bus_id="00000000:81:00.0")
    b = fake_nvml.FakeGpu(uuid="GPU-aabb-2", pci_bus_id="00000000:01:00.0")
    nv = install([a, b])
    nv.nvmlInit()
    got = gpus_mod.resolve(nv, ["GPU-aabb", "81:00.0", "GPU-aabb-2"])
    assert [g.uuid for g in got] == ["GPU-aabb-2", "GPU-aaaa-1"]
    assert [g.uuid for g in gpus_mod.resolve(nv, None)] == ["GPU-aaaa-1", "GPU-aabb-2"]
    for bad, msg in (
        ("GPU-aa", "ambiguous"),
        ("GPU-zz", "matches no GPU"),
        ("5", "only 2 GPU"),
        ("x", "expected"),
    ):
        with pytest.raises(gpus_mod.ResolveError, match=msg):
            gpus_mod.resolve(nv, [bad])


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (None, None),
        ("", []),
        ("-1", []),
        ("1,0", ["1", "0"]),
        ("0,-1,1", ["0"]),
        ("GPU-ab,MIG-cd", ["GPU-ab", "MIG-cd"]),
    ],
)
def test_cuda_visible_devices_parsing(raw: str | None, want: list[str] | None, monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = {} if raw is None else {"CUDA_VISIBLE_DEVICES": raw}
    assert gpus_mod.visible_selectors(env) == want


def test_profile_env_overrides_inherited_cuda_visible_devices(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert gpus_mod.visible_selectors(None) == ["3"]
    assert gpus_mod.visible_selectors({"CUDA_VISIBLE_DEVICES": "1"}) == ["1"]
    assert gpus_mod.sampling_plan(None, {"CUDA_VISIBLE_DEVICES": ""}) == ([], gpus_mod.HIDDEN_REASON)
    assert gpus_mod.sampling_plan(gpus_mod.SIM_REASON, None) == ([], gpus_mod.SIM_REASON)


def _null_case(tmp_path: Path, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    with open_sampler(tmp_path, **kw) as s:
        status_inside = s.status
    rows, _ = read_jsonl(tmp_path / TELEMETRY)
    assert status_inside == s.status
    assert [r["kind"] for r in rows] == ["header"] and rows[0]["status"] == s.status
    st = point_stats(rows)
    assert st["n_samples"] == 0 and st["busy_median_sm_clock_mhz"] is None and st["status"] == s.status
    return s, rows


def test_null_sampler_when_pynvml_missing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    s, _ = _null_case(tmp_path)
    assert s.status == "no NVML: nvidia-ml-py (pynvml) is not installed"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ("LibraryNotFound", "no NVML: libnvidia-ml.so.1 not found"),
        ("DriverNotLoaded", "no GPU: NVIDIA driver not loaded"),
        ("NoPermission", "no NVML: permission denied opening the NVIDIA device"),
    ],
)
def test_null_sampler_when_nvml_init_fails(tmp_path: Path, install, error: str, status: str) -> None:
    install(init_error=error)
    s, _ = _null_case(tmp_path)
    assert s.status == status


def test_rerun_moves_the_earlier_attempt_aside(tmp_path: Path, install) -> None:
    install()
    _run(tmp_path, n_samples=2)
    first = (tmp_path / TELEMETRY).read_text()
    with open_sampler(tmp_path, gpus=[], null_reason="sim server: no GPU to sample"):
        pass
    assert (tmp_path / "telemetry.attempt-1.jsonl").read_text() == first
    rows, _ = read_jsonl(tmp_path / TELEMETRY)
    assert len(rows) == 1 and rows[0]["status"] == "sim server: no GPU to sample"


def test_null_sampler_for_sim_no_gpus_and_unknown_selector(tmp_path: Path, install) -> None:
    mod = install()
    s, _ = _null_case(tmp_path / "sim", gpus=[], null_reason=gpus_mod.SIM_REASON)
    assert s.status == "sim server: no GPU to sample" and mod.init_count == 0
    s, _ = _null_case(tmp_path / "none", gpus=[])
    assert s.status == "no GPU: the server uses none"
    s, _ = _null_case(tmp_path / "bad", gpus=["GPU-nope"])
    assert s.status == "no GPU: GPU GPU-nope: UUID matches no GPU"
    install([])
    s, _ = _null_case(tmp_path / "zero")
    assert s.status == "no GPU: NVML sees none"


def test_real_pynvml_gives_samples_or_a_reason(tmp_path: Path) -> None:
    """Whatever this machine has: ok with samples, or a null sampler that says why."""
    s, rows = _run(tmp_path, n_samples=2, interval_s=0.05)
    assert rows[0]["kind"] == "header"
    if s.status.startswith("ok"):
        assert _samples(rows)
    else:
        assert s.status.startswith(("no NVML", "no GPU")) and not _samples(rows)


# ----------------------------------------------------------------- stats from hand-built samples


def _s(
    t: float, sm: float | None, util: int | None = 90, reasons: int | None = 0, **kw: Any
) -> dict[str, Any]:
    row = {"kind": "sample", "t_mono": t, "gpu": 0, "uuid": "GPU-x", "sm_clock_mhz": sm, "gpu_util": util}
    row.update({"reasons": reasons, "max_sm_clock_mhz": 1755, "temp_c": 70, **kw})
    return row


def test_point_stats_busy_median_ignores_idle_samples() -> None:
    rows = [
        _s(0, 210, util=0),
        _s(1, 1500),
        _s(2, 1600),
        _s(3, 1700),
        _s(4, 210, util=10),
        _s(5, 300, util=49),
    ]
    st = point_stats(rows)
    assert st["busy_median_sm_clock_mhz"] == 1600 and st["n_busy"] == 3 and st["n_samples"] == 6
    assert st["sm_clock_min_mhz"] == 210 and st["sm_clock_max_mhz"] == 1700 and st["max_sm_clock_mhz"] == 1755


def test_point_stats_reason_flags() -> None:
    thermal = [_s(i, 1000, reasons=r) for i, r in enumerate([0x20, 0x40, 0x60, 0, 0x1, 0x4, 0x4, 0x4, 0, 0])]
    st = point_stats(thermal)
    assert st["thermal_fraction"] == pytest.approx(0.3) and st["power_cap_fraction"] == pytest.approx(0.3)
    assert st["hw_slowdown"] is False and st["power_brake"] is False
    blips = [_s(i, 1000, reasons=r) for i, r in enumerate([0x8, 0, 0x8, None, 0x8, 0])]
    assert point_stats(blips)["hw_slowdown"] is False  # single blips (P-state changes) do not count
    run = [_s(i, 1000, reasons=r) for i, r in enumerate([0, 0x8, 0x8 | 0x4, 0])]
    assert point_stats(run)["hw_slowdown"] is True
    brake = [_s(i, 1000, reasons=r) for i, r in enumerate([0, 0x80, 0])]
    assert point_stats(brake)["power_brake"] is True
    assert point_stats([_s(0, 1000, reasons=None)])["thermal_fraction"] is None


def test_point_stats_energy_violations_and_per_token() -> None:
    rows = [
        _s(0, 1500, energy_mj=10_000, violation_power_ns=5, violation_thermal_ns=100, temp_c=60),
        _s(1, 1500, energy_mj=None, violation_power_ns=7, violation_thermal_ns=100, temp_c=83),
        _s(2, 1500, energy_mj=130_000, violation_power_ns=25, violation_thermal_ns=2_000_100, temp_c=71),
    ]
    st = point_stats(rows, output_tokens=240)
    assert st["energy_j"] == pytest.approx(120.0)
    assert st["energy_per_output_token_j"] == pytest.approx(0.5)
    assert st["violation_power_ns"] == 20 and st["violation_thermal_ns"] == 2_000_000
    assert st["temp_max_c"] == 83
    reset = [_s(0, 1, energy_mj=500), _s(1, 1, energy_mj=100)]
    assert point_stats(reset)["energy_j"] is None  # counter went backwards: no made-up number


def test_point_stats_worst_gpu_governs_and_energy_sums() -> None:
    fast = [dict(_s(i, 1700, energy_mj=1000 * i), uuid="GPU-a") for i in range(4)]
    slow = [
        dict(_s(i, 900, reasons=0x20, energy_mj=2000 * i, temp_c=88), uuid="GPU-b", gpu=1) for i in range(4)
    ]
    st = point_stats(fast + slow)
    assert st["n_gpus"] == 2 and st["governing_gpu"] == "GPU-b"
    assert st["busy_median_sm_clock_mhz"] == 900 and st["thermal_fraction"] == 1.0
    assert st["temp_max_c"] == 88 and st["energy_j"] == pytest.approx(3 * 1.0 + 3 * 2.0)
    assert [g["busy_median_sm_clock_mhz"] for g in st["per_gpu"]] == [1700, 900]


def test_point_stats_without_utilization_uses_every_sample() -> None:
    st = point_stats([_s(0, 1000, util=None), _s(1, 1200, util=None), _s(2, 1400, util=None)])
    assert st["busy_median_sm_clock_mhz"] == 1200 and st["per_gpu"][0]["busy_basis"].startswith("all samples")


def test_merge_seed_stats_worst_seed_governs() -> None:
    s0 = point_stats([_s(0, 1700), _s(1, 1700)], output_tokens=10)
    s1 = point_stats([_s(0, 800, reasons=0x20), _s(1, 800, reasons=0)])
    m = merge_seed_stats([s0, s1])
    assert m["busy_median_sm_clock_mhz"] == 800 and m["thermal_fraction"] == 0.5 and m["n_samples"] == 4
    assert len(m["per_seed"]) == 2 and m["seeds_without_samples"] == 0


# ----------------------------------------------------------------- clock locking


def test_locked_clocks_locks_then_resets(install) -> None:
    mod = install([fake_nvml.FakeGpu(uuid="GPU-a"), fake_nvml.FakeGpu(uuid="GPU-b", pci_bus_id="0:02:00.0")])
    with locked_clocks(1400) as rec:
        assert [g.locked for g in mod.gpus] == [(1400, 1400), (1400, 1400)]
        assert [g["uuid"] for g in rec["gpus"]] == ["GPU-a", "GPU-b"] and rec["sm_clock_mhz"] == 1400
    assert [g.locked for g in mod.gpus] == [None, None] and rec["reset"] == "ok"
    assert mod.init_count == 0


def test_locked_clocks_resets_on_error_and_ctrl_c(install) -> None:
    mod = install()
    with pytest.raises(RuntimeError), locked_clocks(1200):
        raise RuntimeError("bench blew up")
    assert mod.gpus[0].locked is None
    with pytest.raises(KeyboardInterrupt), locked_clocks(1200):
        assert mod.gpus[0].locked == (1200, 1200)
        raise KeyboardInterrupt
    assert mod.gpus[0].locked is None
    assert [c[0] for c in mod.log].count("nvmlDeviceResetGpuLockedClocks") == 2


def test_locked_clocks_resets_on_sigterm(install) -> None:
    mod = install()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), locked_clocks(1100):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler raises here
    assert mod.gpus[0].locked is None and signal.getsignal(signal.SIGTERM) is before


def test_locked_clocks_refusals_are_one_line_errors(install, monkeypatch) -> None:
    install(can_lock=False)
    with pytest.raises(HarnessError, match="needs root"), locked_clocks(1400):
        pass
    install()
    with pytest.raises(HarnessError, match="above GPU 0's max SM clock of 1980"), locked_clocks(2500):
        pass
    # the second GPU refuses: the first must not stay locked
    mod = install([fake_nvml.FakeGpu(uuid="GPU-a"), fake_nvml.FakeGpu(uuid="GPU-b", unsupported={"lock"})])
    with pytest.raises(HarnessError, match="GPU 1 .*NVML refused"), locked_clocks(1400):
        pass
    assert mod.gpus[0].locked is None and ("nvmlDeviceResetGpuLockedClocks", 0, ()) in mod.log
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(HarnessError, match="not installed"), locked_clocks(1400):
        pass


# ----------------------------------------------------------------- harness gpu


def test_harness_gpu_lists_what_nvml_sees(install, capsys) -> None:
    from harness.commands import gpu

    install([fake_nvml.FakeGpu(name="NVIDIA L4", script={"reasons": [0x20 | 0x4]}, unsupported={"power_mw"})])
    assert gpu.run(gpu.build_parser("harness gpu").parse_args(["--json"])) == 0
    snap = json.loads(capsys.readouterr().out)
    g = snap["gpus"][0]
    assert snap["status"] == "ok: 1 GPU" and snap["driver"] == "560.35.03"
    assert g["name"] == "NVIDIA L4" and g["reasons_decoded"] == ["SwPowerCap", "SwThermalSlowdown"]
    assert g["power_w"]["error"].startswith("NotSupported") and g["sm_clock_mhz"] == 1755
    assert gpu.run(gpu.build_parser("harness gpu").parse_args([])) == 0
    out = capsys.readouterr().out
    assert "NVIDIA L4" in out and "SwThermalSlowdown" in out


@pytest.mark.slow
def test_harness_gpu_without_nvml_says_why_and_exits_0() -> None:
    r = harness("gpu", timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("NVML: ")


# ----------------------------------------------------------------- scripts/gpu_probe.py


def _load_probe():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT / "scripts" / "gpu_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_gpu_probe_without_gpu_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_probe.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if json.loads((tmp_path / "probe.json").read_text())["nvml"]["gpus"]:
        pytest.skip("this machine has a GPU: the probe ran for real")
    assert r.returncode == 0 and r.stdout.startswith("no GPU: ")
    rows, _ = read_jsonl(tmp_path / TELEMETRY)
    assert len(rows) == 1 and rows[0]["status"].startswith("no GPU: ")


@pytest.mark.slow
def test_gpu_probe_pipeline_on_fake_nvml_and_stub_torch(tmp_path: Path, install, monkeypatch) -> None:
    """The GPU path (sampler, phases, summary, validate) with the load itself stubbed out."""
    import types

    gpu = fake_nvml.FakeGpu(
        script={"util_gpu": [0, 99], "sm": [1980, 1600], "reasons": [0, 0x4], "temp": [40, 71]}
    )
    install([gpu])
    torch = types.ModuleType("torch")
    torch.__version__ = "0.0-stub"
    torch.cuda = types.SimpleNamespace(is_available=lambda: True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    probe = _load_probe()

    def fake_drive(busy_s: float, size: int) -> dict[str, Any]:
        time.sleep(busy_s)
        return {"matmuls": 0, "seconds": busy_s, "tflops": 0.0, "device": "stub"}

    monkeypatch.setattr(probe, "_drive", fake_drive)
    argv = ["gpu_probe", "--busy-s", "0.3", "--idle-s", "0.1", "--interval-s", "0.02", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    assert probe.main() == 0
    result = json.loads((tmp_path / "probe.json").read_text())
    assert result["telemetry_status"] == "ok: 1 GPU"
    assert result["busy"]["busy_median_sm_clock_mhz"] == 1600 and result["busy"]["power_cap_fraction"] == 1.0
    verdicts = json.loads((tmp_path / "validate.json").read_text())
    assert [p["verdict"] for p in verdicts["points"]] == ["ok", "ok"]
    assert (tmp_path / "validate.txt").read_text().rstrip().endswith("exit 0")


def test_a_server_started_on_the_cpu_has_no_gpu_to_watch_and_is_not_flagged() -> None:
    from harness.telemetry.gpus import CPU_REASON, sampling_plan
    from harness.verdicts import expected_no_gpu

    assert sampling_plan(None, {}, ["--max-total-tokens", "900", "--device", "cpu"]) == ([], CPU_REASON)
    assert sampling_plan(None, {}, ["--device=cpu"]) == ([], CPU_REASON)
    assert sampling_plan(None, {}, ["--device", "cuda"]) == (None, None)  # every GPU NVML sees
    assert expected_no_gpu(CPU_REASON)


def test_ctrl_c_inside_start_unwinds_as_ctrl_c_with_the_file_closed(
    tmp_path: Path, install, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGINT between creating the sampling thread and its first run (CI's signal stress hit it): stop()
    once joined that never-started thread, and the run ended 'cannot join thread before it is started'."""
    import harness.telemetry.sampler as sampler_mod

    install()

    class Interrupted(sampler_mod.threading.Thread):
        def start(self) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr(sampler_mod.threading, "Thread", Interrupted)
    with pytest.raises(KeyboardInterrupt), open_sampler(tmp_path, interval_s=0.005):
        pytest.fail("the sampler must not yield when its start was interrupted")
    rows, bad = read_jsonl(tmp_path / TELEMETRY)
    assert bad == 0 and [r for r in rows if r["kind"] == "sample"] == []
