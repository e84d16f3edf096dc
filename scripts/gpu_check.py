"""The GPU node check (`make gpu-check`): a real GPU-backed server, NVML at full rate, the clock during prefill.

On a node with an NVIDIA GPU, from the image's own python, within 8 minutes (docs/telemetry.md#gpu-node-check):
1. install the `make gpu-bundle` folder with `pip --no-index --no-deps --target` (nothing from a network);
2. make a random-weight Llama (~1.65 B parameters, bf16) on cuda:0 in seconds;
3. run `transformers serve` on cuda:0 with it through an ordinary `launch: command` profile, and a short
   working-set spec through `harness bench` with NVML sampled every 10 ms (the prefill-window clock);
4. the gpu_probe matrix load (busy, then idle): clocks, throttle reasons, power, temperature;
5. a `--lock-clocks` round trip as root: lock, sample under load, always reset, sample again (a refusal: one line);
6. `harness validate`, and one summary. Everything lands in one folder ($OUT, else ./gpu-check-out), 8 files.
A step that fails is said in one line and the next one still runs; exit 0 when every step passed, 1 otherwise.
Without a GPU it refuses in one line, exit 2, before touching anything.

`--device cpu --python P --harness-python H` rehearses steps 1-3 and 6 on a machine without a GPU: a tiny model
and the server on P (a venv with torch + transformers), the harness's commands on H (which has the image's
pandas and matplotlib), a bundle built for their Python with `gpu_bundle.py --python-version`, one request at
a time (continuous batching sizes its KV cache to the machine); the test suite runs it, so the node gets
plumbing that ran.

    python3 scripts/gpu_check.py [--bundle gpu-bundle] [--out DIR] [--budget-s 450]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_FILES = (
    "gpu-check.md",
    "gpu-check.log",
    "summary.json",
    "validate.txt",
    "validate.json",
    "probe.json",
    "lock.json",
    "server.log.gz",
)
MAX_FILE = 16 * 2**20
SERVE_MODULES = ("transformers.cli.transformers", "transformers.commands.transformers_cli")  # 5.x, then 4.x
LOCK_MHZ = 1200  # well under an H200's 1980 MHz, so a working lock shows in the samples


def no_gpu_reason(python: str = sys.executable) -> str | None:
    """Why this machine cannot run the check (None: it can). Standard library and pynvml only: nothing is
    installed or imported from the harness before this says yes."""
    try:
        import pynvml  # noqa: PLC0415
    except ImportError:
        return "no NVML (nvidia-ml-py is not installed)"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVML names its own failures (driver not loaded, library missing)
        return f"no NVML ({e})"
    try:
        n = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    if n == 0:
        return "NVML sees no GPU"
    r = subprocess.run(
        [python, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if r.stdout.strip() != "True":
        tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or ["no answer"]
        return f"torch cannot use CUDA here ({tail[0][:160]})"
    return None


class Check:
    """The steps, their budget, their log and their results."""

    def __init__(
        self,
        out: Path,
        work: Path,
        bundle: Path,
        budget_s: float,
        python: str,
        device: str,
        harness_python: str,
    ) -> None:
        self.out, self.work, self.bundle = out, work, bundle
        self.python, self.device = python, device  # the image's python; cuda:0 (cpu: a rehearsal)
        self.harness_python = harness_python  # the image's python too, but in a rehearsal
        # what `transformers serve` is run as (the install step finds it)
        self.serve_module = SERVE_MODULES[0]
        self.site = work / "site"
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s
        self.steps: dict[str, dict[str, Any]] = {}
        self.logf = (out / "gpu-check.log").open("a")
        self.env = {
            **os.environ,
            "PYTHONPATH": str(self.site),  # the wheel under test, not the checkout
            "HARNESS_CACHE": str(work / "cache"),
            "HF_HUB_OFFLINE": "1",
            "PIP_BREAK_SYSTEM_PACKAGES": "1",  # --target leaves the image's packages alone; older pips ignore it
            "NO_COLOR": "1",
            "COLUMNS": "160",
        }

    def say(self, line: str) -> None:
        stamp = f"[{time.monotonic() - self.t0:6.1f}s] "
        print(stamp + line, flush=True)
        self.logf.write(stamp + line + "\n")
        self.logf.flush()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(
        self, name: str, argv: list[str], timeout: float, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        """A child process under the budget; its output goes to the log."""
        limit = max(5.0, min(timeout, self.left()))
        self.say(f"{name}: {' '.join(argv[:6])}{' …' if len(argv) > 6 else ''} (limit {limit:.0f} s)")
        try:
            r = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=self.env,
                cwd=cwd or self.work,
                timeout=limit,
                check=False,
            )
        except OSError as e:
            return subprocess.CompletedProcess(argv, 127, "", f"cannot run {argv[0]}: {e}")
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            self.logf.write(out[-20000:] + "\n")
            return subprocess.CompletedProcess(argv, 124, out, f"timed out after {limit:.0f} s")
        self.logf.write((r.stdout + r.stderr)[-50000:] + "\n")
        self.logf.flush()
        return r

    def step(self, name: str, ok: bool, line: str, **facts: Any) -> None:
        self.steps[name] = {"ok": ok, "line": line, "at_s": round(time.monotonic() - self.t0, 1), **facts}
        self.say(f"{name}: {'ok' if ok else 'FAILED'}: {line}")


def _tail(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (r.stdout + r.stderr).strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit {r.returncode}"


INSTALL_PROBE = """
import importlib.util, os
import harness, pydantic, fastapi, uvicorn, openai, accelerate, orjson, torch, transformers
import transformers.utils.import_utils as iu
assert getattr(iu, "is_serve_available", lambda: True)(), "transformers serve: its dependencies do not import"

def found(m):
    try:
        return importlib.util.find_spec(m) is not None
    except ImportError:
        return False

mods = [m for m in {modules!r} if found(m)]
print("transformers", transformers.__version__, "torch", torch.__version__, {gpu},
      "serve module", mods[0] if mods else None, "harness from", os.path.dirname(harness.__file__))
"""


def install(c: Check) -> bool:
    wheels = sorted(str(w) for w in c.bundle.glob("*.whl"))
    if not wheels:
        c.step("install", False, f"no wheels in {c.bundle}: run `make gpu-bundle` where there is a network")
        return False
    r = c.run(
        "install",
        [
            c.python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--target",
            str(c.site),
            *wheels,
        ],
        120,
    )
    how = "pip --no-index --no-deps --target"
    if r.returncode != 0:  # an image without pip: a wheel is a zip, and --target is an unpacked folder
        how = f"unpacked, since pip failed ({_tail(r)[:120]})"
        c.say(f"install: pip failed: {_tail(r)}; unpacking the wheels instead")
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                z.extractall(c.site)
    gpu = "torch.cuda.get_device_name(0)" if c.device != "cpu" else "'cpu'"
    probe = INSTALL_PROBE.format(modules=SERVE_MODULES, gpu=gpu)
    r = c.run("install", [c.python, "-c", probe], 120)
    found = re.search(r"serve module (\S+)", r.stdout)
    c.serve_module = found.group(1) if found and found.group(1) != "None" else SERVE_MODULES[0]
    ok = r.returncode == 0 and bool(found) and found.group(1) != "None"
    c.step("install", ok, f"{len(wheels)} wheels ({how}); {_tail(r)}", versions=_tail(r))
    return ok


def make_model(c: Check) -> Path | None:
    folder = c.work / "model"
    shape, dtype, dev = (
        ("GPU_SHAPE", "bfloat16", "cuda") if c.device != "cpu" else ("TINY_SHAPE", "float32", "cpu")
    )
    code = (
        "import sys, json; from pathlib import Path; "
        f"from harness.realserver.tf_serve import {shape} as S, serve_model; "
        f"m = serve_model(Path(sys.executable), S, Path({str(folder)!r}), dtype={dtype!r}, device={dev!r}); "
        "print(json.dumps({'folder': str(m.folder), 'seconds': m.seconds}))"
    )
    r = c.run("model", [c.python, "-c", code], 180)
    info = json.loads((folder / "model.json").read_text()) if (folder / "model.json").is_file() else {}
    ok = r.returncode == 0 and bool(info)
    c.step(
        "model",
        ok,
        f"{info.get('params')} parameters, {dtype}, {info.get('seconds')}" if ok else _tail(r),
        **info,
    )
    return folder if ok else None


def bench(c: Check, model: Path, cb: bool) -> dict[str, Any] | None:
    size = "groups=8, prompts_per_group=8, system_prompt_tokens=1024, output_tokens=32, concurrency=16"
    if c.device == "cpu":
        size = "groups=2, prompts_per_group=3, system_prompt_tokens=64, output_tokens=4, concurrency=2"
    code = (
        "import sys; from pathlib import Path; from harness.realserver import tf_serve as t; "
        f"p = t.serve_profile(sys.executable, Path({str(model)!r}), {c.device!r}, pythonpath={str(c.site)!r}, "
        f"hub_cache=Path({str(c.work / 'hub')!r}), continuous_batching={cb}, module={c.serve_module!r}); "
        f"s = t.check_spec(p, Path({str(model / 'tokenizer.json')!r}), name='gpu-check', {size}); "
        f"t.write_spec(Path({str(c.work / 'gpu-check.yaml')!r}), s)"
    )
    (c.work / "hub").mkdir(exist_ok=True)
    r = c.run("bench", [c.python, "-c", code], 60)
    if r.returncode != 0:
        c.step("bench", False, f"spec: {_tail(r)}")
        return None
    shutil.rmtree(c.work / "capture", ignore_errors=True)
    argv = [
        c.harness_python,
        "-m",
        "harness",
        "bench",
        "--node",
        "gpu-check",
        "--spec",
        str(c.work / "gpu-check.yaml"),
    ]
    argv += ["--capture", str(c.work / "capture"), "--summaries", str(c.work / "summaries")]
    argv += ["--telemetry-interval-s", "0.01", "--retries", "0", "--quiet"]
    r = c.run("bench", argv, 150 if cb else 200)
    path = c.work / "summaries" / "gpu-check.json"
    summary = json.loads(path.read_text()) if path.is_file() else None
    point = (summary or {}).get("points", [{}])[0] if summary else {}
    ok = r.returncode in (0, 1) and point.get("status") == "ok"  # 1: validate flagged something, said below
    tel, m = point.get("telemetry") or {}, point.get("median") or {}
    c.step(
        "bench",
        ok,
        (
            f"transformers serve on {c.device} ({'continuous batching' if cb else 'one request at a time'}): "
            f"{m.get('ok')}/{m.get('requests')} ok, TTFT p50 {_num(m, 'ttft_median_s', 3)} s, "
            f"{_num(m, 'output_tok_s', 0)} tok/s; SM clock prefill-window {_num(tel, 'prefill_median_sm_clock_mhz')} "
            f"MHz over {tel.get('n_prefill')} samples vs busy-median {_num(tel, 'busy_median_sm_clock_mhz')} MHz "
            f"over {tel.get('n_busy')} ({tel.get('n_samples')} samples)"
        )
        if point
        else _tail(r),
        continuous_batching=cb,
        exit=r.returncode,
        telemetry={k: v for k, v in tel.items() if k != "per_gpu"},
        verdict=point.get("verdict"),
    )
    if path.is_file():
        shutil.copy(path, c.out / "summary.json")
    logs = list((c.work / "capture").glob("gpu-check/gpu-check/*/server.log"))
    if logs:
        with gzip.open(c.out / "server.log.gz", "wb") as f:
            f.write(logs[0].read_bytes()[-8 * 2**20 :])
    return summary if ok else None


def _num(d: dict[str, Any], key: str, digits: int = 0) -> str:
    v = d.get(key)
    return f"{v:.{digits}f}" if isinstance(v, int | float) else "-"


def probe(c: Check) -> None:
    pdir = c.work / "probe"
    r = c.run(
        "probe",
        [
            c.python,
            str(ROOT / "scripts" / "gpu_probe.py"),
            "--busy-s",
            "20",
            "--idle-s",
            "8",
            "--out",
            str(pdir),
        ],
        90,
    )
    path = pdir / "probe.json"
    if not path.is_file():
        c.step("probe", False, _tail(r))
        return
    p = json.loads(path.read_text())
    shutil.copy(path, c.out / "probe.json")
    busy, idle, load = p.get("busy") or {}, p.get("idle") or {}, p.get("load") or {}
    c.step(
        "probe",
        r.returncode == 0 and bool(load),
        f"{_num(load, 'tflops')} TFLOP/s bf16 on {load.get('device')}; busy: SM {_num(busy, 'busy_median_sm_clock_mhz')}"
        f"/{_num(busy, 'max_sm_clock_mhz')} MHz, {_num(busy, 'power_median_w')} W, max {busy.get('temp_max_c')} °C, "
        f"reasons 0x{(busy.get('reasons_seen') or 0):x}; idle: SM {_num(idle, 'sm_clock_min_mhz')}-"
        f"{_num(idle, 'sm_clock_max_mhz')} MHz, {_num(idle, 'power_median_w')} W, max {idle.get('temp_max_c')} °C",
    )


LOCK_CODE = """
import json, sys, time
from pathlib import Path
import torch
from harness.capture import read_jsonl
from harness.errors import HarnessError
from harness.telemetry.clocks import locked_clocks
from harness.telemetry.sampler import open_sampler
from harness.telemetry.stats import point_stats

out, mhz = Path(sys.argv[1]), int(sys.argv[2])
secs = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

def load(folder, seconds):
    with open_sampler(folder, gpus=None, interval_s=0.05):
        t = time.monotonic()
        while time.monotonic() - t < seconds:
            a @ a
            torch.cuda.synchronize()
    rows, _ = read_jsonl(folder / "telemetry.jsonl")
    st = point_stats(rows)
    return {k: st.get(k) for k in ("busy_median_sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz", "n_samples")}

res = {"mhz": mhz}
try:
    with locked_clocks(mhz) as rec:
        res["locked"] = load(out / "locked", secs)
    res["record"] = rec
except HarnessError as e:
    res["refused"] = str(e)
res["after_reset"] = load(out / "after", secs * 0.8)
print(json.dumps(res, default=str))
"""


def lock(c: Check) -> None:
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        c.step("lock", False, "not root: the --lock-clocks round trip needs root, skipped")
        return
    ldir = c.work / "lock"
    for sub in ("locked", "after"):
        (ldir / sub).mkdir(parents=True, exist_ok=True)
    r = c.run("lock", [c.python, "-c", LOCK_CODE, str(ldir), str(LOCK_MHZ)], 60)
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        c.step("lock", False, _tail(r))
        return
    (c.out / "lock.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    ok, line = judge_lock(res)
    c.step("lock", ok, line, **res)


def judge_lock(res: dict[str, Any]) -> tuple[bool, str]:
    """Did the lock hold under load (within 50 MHz) and let go after the reset; a refusal in one line."""
    if "refused" in res:
        return False, f"refused: {res['refused']}"
    mhz = res["mhz"]
    held = (res.get("locked") or {}).get("busy_median_sm_clock_mhz")
    after = (res.get("after_reset") or {}).get("busy_median_sm_clock_mhz")
    reset = (res.get("record") or {}).get("reset")
    ok = (
        held is not None
        and abs(held - mhz) <= 50
        and reset == "ok"
        and after is not None
        and after > mhz + 50
    )
    return (
        ok,
        f"locked at {mhz} MHz: busy-median {held} MHz under load; reset: {reset}; after the reset {after} MHz",
    )


def validate(c: Check) -> None:
    path = c.out / "summary.json"
    if not path.is_file():
        c.step("validate", False, "no summary to validate (the bench step failed)")
        return
    argv = [c.harness_python, "-m", "harness", "validate", str(path)]
    r = c.run("validate", argv, 60)
    (c.out / "validate.txt").write_text(r.stdout + r.stderr + f"exit {r.returncode}\n")
    j = c.run("validate", [*argv, "--json"], 60)
    (c.out / "validate.json").write_text(j.stdout)
    try:
        line = json.loads(j.stdout).get("line") or _tail(r)
    except ValueError:
        line = _tail(r)
    c.step("validate", r.returncode in (0, 1), f"exit {r.returncode}: {line}", exit=r.returncode)


def write_summary(c: Check, gpu: str) -> int:
    ok = all(s["ok"] for s in c.steps.values())
    lines = [
        "# GPU node check",
        "",
        f"- GPU: {gpu}",
        f"- python: {c.python}; bundle: {c.bundle}; device: {c.device}",
        f"- took {time.monotonic() - c.t0:.0f} s; {'every step passed' if ok else 'some steps FAILED'}",
        "",
        "| step | ok | what it found |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {'yes' if s['ok'] else 'NO'} | {s['line']} |" for n, s in c.steps.items()]
    text = "\n".join(lines) + "\n\n```json\n" + json.dumps(c.steps, indent=1, default=str) + "\n```\n"
    (c.out / "gpu-check.md").write_text(text)
    c.say("\n".join(lines))
    return 0 if ok else 1


def _gpu_name() -> str:
    import pynvml  # noqa: PLC0415 - present: no_gpu_reason said yes

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return f"{pynvml.nvmlDeviceGetName(h)}, driver {pynvml.nvmlSystemGetDriverVersion()}"
    finally:
        pynvml.nvmlShutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=ROOT / "gpu-bundle")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check-out"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/harness-gpu-check"))
    ap.add_argument(
        "--budget-s", type=float, default=450.0, help="the steps' time in all (the check: 8 minutes)"
    )
    ap.add_argument(
        "--python", default=sys.executable, help="the interpreter with torch + transformers (the image's)"
    )
    ap.add_argument("--device", default="cuda:0", help="cuda:0; cpu rehearses the plumbing without a GPU")
    ap.add_argument("--harness-python", default=None, help="runs the harness's commands (default: --python)")
    args = ap.parse_args()
    rehearsal = args.device == "cpu"
    why = None if rehearsal else no_gpu_reason(args.python)
    if why is not None:
        print(f"gpu-check: no GPU here: {why}; run it on a GPU node (docs/telemetry.md#gpu-node-check)")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    c = Check(
        args.out.resolve(),
        args.work.resolve(),
        args.bundle.resolve(),
        args.budget_s,
        os.path.abspath(args.python) if os.sep in args.python else args.python,  # not resolved: a venv's link
        args.device,
        os.path.abspath(args.harness_python or args.python)
        if os.sep in (args.harness_python or args.python)
        else (args.harness_python or args.python),
    )
    gpu = "none: a CPU rehearsal" if rehearsal else _gpu_name()
    c.say(f"gpu-check: {gpu}; out {c.out}; budget {args.budget_s:.0f} s")
    try:
        model = make_model(c) if install(c) else None
        if (
            model is not None
            and bench(c, model, cb=not rehearsal) is None
            and c.left() > 200
            and not rehearsal
        ):
            c.say("bench: again without continuous batching")
            bench(c, model, cb=False)
        for fn in (probe, lock, validate):
            if rehearsal and fn is not validate:
                continue  # nothing to probe or lock without a GPU
            if c.left() > 15:
                fn(c)
            else:
                c.step(fn.__name__, False, "skipped: out of time")
    except KeyboardInterrupt:
        c.say("interrupted")
    finally:
        code = write_summary(c, gpu)
        c.logf.close()
        extra = [f.name for f in c.out.iterdir() if f.name not in OUT_FILES]
        big = [f.name for f in c.out.iterdir() if f.stat().st_size > MAX_FILE]
        if extra or big:
            print(f"gpu-check: output folder breaks its limits: unexpected {extra}, over 16 MiB {big}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
