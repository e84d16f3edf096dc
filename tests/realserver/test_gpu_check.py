"""`make gpu-bundle` and `make gpu-check` (issue 38): the wheel folder a GPU node installs with `--no-index`, the
one-line refusal without a GPU, and a CPU rehearsal of the check's plumbing (install from the folder, a
random-weight model, transformers serve through a `launch: command` profile, harness bench, validate, the
output folder's limits), so the first GPU node runs steps that already ran here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.helpers.sglang_venv import sglang_cpu_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64 * 2**20
# what the H200 image already has: the bundle must not bring (and shadow) any of these
IMAGE_HAS = (
    "torch",
    "transformers",
    "nvidia_ml_py",
    "pandas",
    "httpx",
    "aiohttp",
    "rich",
    "PyYAML",
    "uvloop",
)


def _gpu_visible() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - any NVML failure means no GPU to run on
        return False
    try:
        return pynvml.nvmlDeviceGetCount() > 0
    finally:
        pynvml.nvmlShutdown()


def test_make_gpu_check_refuses_in_one_line_without_a_gpu(tmp_path: Path) -> None:
    if _gpu_visible():
        pytest.skip("this machine has a GPU: make gpu-check would run the check, not refuse")
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    for python in (sys.executable, "python3"):  # with nvidia-ml-py (no driver) and without it
        r = subprocess.run(
            [
                "make",
                "-s",
                "-C",
                str(ROOT),
                "gpu-check",
                f"GPU_PYTHON={python}",
                f"GPU_BUNDLE={tmp_path / 'none'}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stdout.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpu-check: no GPU here: "), r.stdout
        assert "docs/telemetry.md#gpu-node-check" in lines[0]
        assert not (tmp_path / "out").exists()  # nothing written, nothing installed


def _build(out: Path, *extra: str, make: bool = False) -> subprocess.CompletedProcess:
    argv = (
        ["make", "-s", "-C", str(ROOT), "gpu-bundle", f"GPU_BUNDLE={out}"]
        if make
        else [sys.executable, str(ROOT / "scripts" / "gpu_bundle.py"), "--out", str(out), *extra]
    )
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    unreachable = r"(Could not fetch|Network is unreachable|Temporary failure in name resolution|Max retries)"
    if r.returncode != 0 and re.search(unreachable, r.stdout + r.stderr, re.I):
        pytest.skip(f"the package index cannot be reached here: {(r.stdout + r.stderr).strip()[-200:]}")
    return r


def test_make_gpu_bundle_is_cp312_manylinux_and_under_64_mib(tmp_path: Path) -> None:
    out = tmp_path / "gpu-bundle"
    r = _build(out, make=True)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"gpu-bundle: (\d+) wheels, ([\d.]+) MiB \(limit 64 MiB\) in ", r.stdout)
    assert m, r.stdout
    files = [f for f in out.iterdir() if f.is_file()]
    total = sum(f.stat().st_size for f in files)
    assert total <= LIMIT and float(m.group(2)) == pytest.approx(total / 2**20, abs=0.06)
    wheels = sorted(f.name for f in files if f.suffix == ".whl")
    assert int(m.group(1)) == len(wheels)
    info = json.loads((out / "bundle.json").read_text())
    assert info["python"] == "cp312" and info["bytes"] == sum((out / w).stat().st_size for w in wheels)
    names = {re.split(r"-\d", w, maxsplit=1)[0].lower().replace("_", "-") for w in wheels}
    for need in (
        "harness",
        "pydantic",
        "pydantic-core",
        "orjson",
        "fastapi",
        "uvicorn",
        "openai",
        "accelerate",
    ):
        assert need in names, (need, wheels)
    assert not names & {n.lower().replace("_", "-") for n in IMAGE_HAS}, names
    for w in wheels:
        tags = w.removesuffix(".whl").split("-")[-3:]
        if tags[2] != "any":  # a binary wheel: CPython 3.12 (or the stable ABI) on manylinux x86_64
            assert tags[0] in ("cp312", "cp36", "cp38") and tags[1] in ("cp312", "abi3"), w
            assert "manylinux" in tags[2] and "x86_64" in tags[2], w
    with zipfile.ZipFile(out / next(w for w in wheels if w.startswith("harness-"))) as z:
        inside = z.namelist()
    assert "harness/realserver/tf_serve.py" in inside and "harness/sim/model_configs/qwen3-8b.json" in inside


@pytest.mark.real_server
def test_gpu_check_rehearsed_on_the_cpu(tmp_path: Path) -> None:
    """The check's own steps with `--device cpu`: everything but the probe and the clock lock."""

    env = sglang_cpu_env("SGLang 0.5.23 CPU venv (torch + transformers for transformers serve)")
    ver = subprocess.run(
        [str(env.python), "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    bundle = tmp_path / "bundle"
    r = _build(bundle, "--python-version", ver)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "gpu_check.py"),
            "--device",
            "cpu",
            "--python",
            str(env.python),
            "--harness-python",
            sys.executable,
            "--bundle",
            str(bundle),
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert took < 480
    files = {f.name: f.stat().st_size for f in out.iterdir()}
    assert len(files) <= 8 and max(files.values()) <= 16 * 2**20, files
    assert {"gpu-check.md", "gpu-check.log", "summary.json", "validate.txt", "validate.json"} <= set(files)
    md = (out / "gpu-check.md").read_text()
    for step in ("install", "model", "bench", "validate"):
        assert re.search(rf"^\| {step} \| yes \|", md, re.M), md
    assert "transformers serve on cpu" in md and "every step passed" in md
    summary = json.loads((out / "summary.json").read_text())
    (point,) = summary["points"]
    assert point["status"] == "ok" and point["median"]["ok"] == 6
    assert point["server"] == "transformers" and point["verdict"]["verdict"] == "no-telemetry"
    assert (out / "validate.txt").read_text().rstrip().endswith("exit 0")
    # the harness came from the installed wheel, not this checkout
    assert f"harness from {tmp_path / 'work' / 'site' / 'harness'}" in md, md


def _load_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_lock_round_trip_on_fake_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The check's lock step (what `--lock-clocks` runs: lock, sample under load, reset, sample) on a fake
    NVML whose clock follows the lock, with torch's matmul stubbed; then a driver that refuses it."""
    import types

    from harness.telemetry import fake_nvml

    check = _load_check()
    gpu = fake_nvml.FakeGpu(uuid="GPU-a", max_sm=1980)
    gpu.script["sm"] = lambda: gpu.locked[0] if gpu.locked else 1980
    mod = fake_nvml.make_module([gpu])
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    torch = types.ModuleType("torch")
    torch.bfloat16 = "bf16"
    torch.cuda = types.SimpleNamespace(synchronize=lambda: time.sleep(0.005))
    monkeypatch.setitem(sys.modules, "torch", torch)

    class M:  # the stub matrix: `a @ a` does nothing
        def __matmul__(self, other: object) -> None:
            return None

    torch.randn = lambda *a, **k: M()
    for sub in ("locked", "after"):
        (tmp_path / sub).mkdir()
    monkeypatch.setattr(sys, "argv", ["lock", str(tmp_path), "1200", "0.3"])
    exec(compile(check.LOCK_CODE, "LOCK_CODE", "exec"), {"__name__": "lock"})  # noqa: S102 - the step's own code
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        res["locked"]["busy_median_sm_clock_mhz"] == 1200
        and res["after_reset"]["busy_median_sm_clock_mhz"] == 1980
    )
    assert res["record"]["reset"] == "ok" and gpu.locked is None
    assert [c[0] for c in mod.log].count("nvmlDeviceResetGpuLockedClocks") == 1
    ok, line = check.judge_lock(res)
    assert (
        ok
        and line
        == "locked at 1200 MHz: busy-median 1200.0 MHz under load; reset: ok; after the reset 1980.0 MHz"
    )
    # a driver that refuses: one line, and the after-reset samples are still taken
    refusing = fake_nvml.make_module([fake_nvml.FakeGpu()], can_lock=False)
    monkeypatch.setitem(sys.modules, "pynvml", refusing)
    exec(compile(check.LOCK_CODE, "LOCK_CODE", "exec"), {"__name__": "lock"})  # noqa: S102
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ok, line = check.judge_lock(res)
    assert not ok and line.startswith("refused: --lock-clocks 1200: ") and "\n" not in line
    assert res["after_reset"]["n_samples"] > 0
    # held at the wrong clock: not ok
    bad = {
        "mhz": 1200,
        "locked": {"busy_median_sm_clock_mhz": 1980},
        "after_reset": {"busy_median_sm_clock_mhz": 1980},
    }
    assert not check.judge_lock({**bad, "record": {"reset": "ok"}})[0]
