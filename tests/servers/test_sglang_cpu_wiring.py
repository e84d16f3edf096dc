"""The sglang-cpu engine kind's wiring, without SGLang: what `--server-kind sglang-cpu` adds and shows, the
`python:` key, and a replaced kernel's loud line turning a point into a failed one (real SGLang itself:
tests/real_sglang/)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import SpecError
from harness.servers.sglang_cpu import SHIM_MARK
from harness.servers.sglang_cpu.flags import cpu_args, cpu_env
from harness.spec.servers import parse_servers
from tests.helpers.cli import run_bench
from tests.helpers.specs import bench_spec

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "helpers" / "fakeserver.py"


def test_cpu_flags_are_added_once_and_hicache_gets_direct_io_only_when_on() -> None:
    plain = cpu_args(["--max-total-tokens", "900"])
    assert plain == ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
                     "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
                     "--disable-overlap-schedule"]  # fmt: skip
    hc = cpu_args(["--enable-hierarchical-cache", "--attention-backend=triton"])
    assert "--hicache-io-backend" in hc and "--hicache-mem-layout" in hc
    assert "--attention-backend" not in hc  # the profile's own choice is kept


def test_cpu_env_puts_the_stand_ins_first_on_the_path_and_keeps_the_profiles() -> None:
    env = cpu_env({"FOO": "1"}, environ={"PYTHONPATH": "/a:/b"})
    assert env["SGLANG_USE_CPU_ENGINE"] == "1" and env["FOO"] == "1"
    first, *rest = env["PYTHONPATH"].split(os.pathsep)
    assert (Path(first) / "sitecustomize.py").is_file() and rest == ["/a", "/b"]


def test_python_key_is_only_for_launch_sglang_and_names_the_key() -> None:
    (p,) = parse_servers([{"name": "s", "launch": "sglang", "python": "~/venv/bin/python"}], None, "f.yaml")
    assert p.python == str(Path.home() / "venv/bin/python")
    with pytest.raises(SpecError, match=r"f.yaml: servers\[0\].python: only for launch: sglang"):
        parse_servers([{"name": "s", "launch": "sim", "python": "/x"}], None, "f.yaml")
    with pytest.raises(SpecError, match=r"servers\[0\].python: expected the path of a python interpreter"):
        parse_servers([{"name": "s", "launch": "sglang", "python": ""}], None, "f.yaml")


def _fake_python(tmp: Path, version: str = "0.5.23") -> Path:
    """An 'interpreter' that answers the harness's sglang version probe (no SGLang needed for a dry run)."""
    py = tmp / "fake-python"
    py.write_text(f"#!/bin/sh\necho {version}\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return py


@pytest.mark.slow
def test_dry_run_shows_the_cpu_launch_line_and_env(tmp_path: Path) -> None:
    spec = bench_spec(tmp_path, "m", servers=[{"name": "hc", "launch": "sglang",
                                               "args": ["--max-total-tokens", "900", "--enable-hierarchical-cache"]}])  # fmt: skip
    py = _fake_python(tmp_path)
    model = tmp_path / "tiny"
    model.mkdir()
    r = run_bench(tmp_path, "--spec", str(spec), "--server-kind", "sglang-cpu", "--sglang-python", str(py),
                  "--model", str(model), "--dry-run")  # fmt: skip
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("server kind: sglang-cpu") and "SGLang 0.5.23" in first, first
    line = next(ln for ln in r.stdout.splitlines() if "server hc [sglang]" in ln)
    assert f"{py} -m sglang.launch_server --model-path {model}" in line
    for flag in ("--device cpu", "--disable-overlap-schedule", "--hicache-io-backend direct",
                 "--hicache-mem-layout layer_first"):  # fmt: skip
        assert flag in line, line
    env = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("env:"))
    assert "SGLANG_USE_CPU_ENGINE=1" in env and "sglang_cpu" in env


@pytest.mark.slow
def test_sglang_cpu_refuses_an_interpreter_without_sglang_in_one_line(tmp_path: Path) -> None:
    spec = bench_spec(tmp_path, "m")
    r = run_bench(tmp_path, "--spec", str(spec), "--server-kind", "sglang-cpu", "--sglang-python", sys.executable,
                  "--dry-run")  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--sglang-python: {sys.executable} has no sglang installed" in r.stderr, r.stderr


@pytest.mark.slow
def test_a_replaced_kernels_line_in_the_server_log_fails_the_point_with_that_reason(tmp_path: Path) -> None:
    said = f"{SHIM_MARK}: kernel sgl_kernel.fused_add_rmsnorm called, but it has no CPU build here (replaced at import)"
    cmd = [sys.executable, str(FAKE), "--port", "{port}", "--say-on-request", said]
    spec = bench_spec(
        tmp_path, "m", sweep={"groups": [1]}, servers=[{"name": "c", "launch": "command", "command": cmd}]
    )
    r = run_bench(tmp_path, "--spec", str(spec), "--retries", "0")
    assert r.returncode != 0
    assert "SGLang called a kernel replaced for the CPU run: " in r.stdout, r.stdout[-2000:]
    rec = json.loads(
        (tmp_path / "capture" / "n" / "tiny" / "c" / "groups=1,seed=0" / "point.json").read_text()
    )
    assert rec["status"] == "failed" and "sgl_kernel.fused_add_rmsnorm" in rec["failure"], rec


@pytest.mark.slow
def test_the_stand_ins_are_lazy_and_a_call_is_loud_and_names_the_kernel() -> None:
    code = (
        "from sgl_kernel.scalar_type import scalar_types\n"
        "table = [scalar_types.uint4b8, scalar_types.uint8b128]  # read at import by SGLang: fine\n"
        "import sgl_kernel.kvcacheio\n"
        "sgl_kernel.silu_and_mul(1)\n"
    )
    env = {**os.environ, **cpu_env({})}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1
    assert f"{SHIM_MARK}: kernel sgl_kernel.silu_and_mul called, but it has no CPU build here" in r.stderr
    assert "ReplacedKernelCalled" in r.stderr
    off = {k: v for k, v in env.items() if k != "SGLANG_USE_CPU_ENGINE"}  # not a CPU run: no stand-ins
    r = subprocess.run(
        [sys.executable, "-c", "import sgl_kernel"], capture_output=True, text=True, env=off, timeout=60
    )
    assert r.returncode == 1 and "No module named 'sgl_kernel'" in r.stderr
