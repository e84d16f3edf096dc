"""What SGLang's Python bench_serving needs beside the SGLang CPU venv: a cached overlay, and its environment.

`python -m sglang.benchmark.serving` imports HF `datasets` at start (sglang/benchmark/datasets/mmmu.py),
and behind serving.py line 57 torchvision (sglang/srt/disaggregation/utils.py → srt/configs/__init__.py →
nano_nemotron_vl.py → srt/multimodal/internvl_utils.py: `import torchvision.transforms as T` and
`InterpolationMode`, used only to preprocess images). The server's venv lacks both and its folder is keyed
by its own lock file, so nothing is added to it: `datasets` and the three packages it brings that the venv
lacks are pinned in sglang_bench_extras.lock and installed once, --no-deps (torch and everything else stay
the venv's), into $HARNESS_CACHE/sglang-bench-extras-<hash>/site, which goes on PYTHONPATH for
bench_serving alone. `built.json` is written only after `import sglang.benchmark.serving` works with it.

torchvision: the build that matches the venv's torch 2.13.0+cpu is 0.28.0+cpu on download.pytorch.org
(not reachable from every machine, this one included); PyPI's torchvision 0.28.0 is the CUDA 13 build: its
_C.so needs libtorch_cuda.so, and `import torchvision` then fails beside CPU torch ("operator
torchvision::nms does not exist", from torchvision/_meta_registrations.py). So bench_serving runs with the
stand-ins the SGLang CPU server itself runs with (harness/servers/sglang_cpu: torchvision replaced at import
by a module whose every name raises if called; no random-ids run calls one). SGLang's code is not changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.paths import cache_root  # noqa: E402
from harness.servers.sglang_cpu import SHIM_MARK  # noqa: E402
from harness.servers.sglang_cpu.flags import cpu_env  # noqa: E402
from harness.servers.sglang_cpu.venv import build_lock  # noqa: E402

LOCK = Path(__file__).with_name("sglang_bench_extras.lock")
INSTALL_TIMEOUT_S = 1200
# run by the venv's python with the overlay's environment: what bench_serving imports, and which
# torchvision it got (the stand-in's __file__ names the shim's mark)
CHECK = (
    "import sys, datasets, sglang.benchmark.serving; tv = sys.modules.get('torchvision'); "
    f"print(datasets.__version__, int({SHIM_MARK!r} in str(getattr(tv, '__file__', ''))))"
)


@dataclass(frozen=True)
class Extras:
    """The overlay's site folder, and whether bench_serving gets torchvision as the stand-in there."""

    site: Path
    torchvision_stand_in: bool


class ExtrasError(Exception):
    """The overlay could not be built or does not import: one line saying which step and why."""


def pins() -> list[str]:
    """The lock file's `name==version` lines."""
    lines = (ln.split("#", 1)[0].strip() for ln in LOCK.read_text().splitlines())
    return [ln for ln in lines if ln]


def overlay_dir(venv_root: Path) -> Path:
    """Keyed by the lock file and the venv it extends (the venv's folder name carries its own lock hash)."""
    digest = hashlib.sha256(LOCK.read_bytes() + venv_root.name.encode()).hexdigest()[:10]
    return cache_root() / f"sglang-bench-extras-{digest}"


def bench_env(site: Path, environ: dict[str, str]) -> dict[str, str]:
    """bench_serving's environment: the overlay, then the server's CPU stand-ins first on PYTHONPATH (with
    SGLANG_USE_CPU_ENGINE=1, the switch they and SGLang's CPU path read), offline HF."""
    base = {k: v for k, v in environ.items() if k != "PYTHONPATH"}
    return {**base, **cpu_env({"PYTHONPATH": str(site)}, base)}


def _check(python: Path, site: Path) -> tuple[str, bool]:
    """(datasets' version, whether torchvision is the stand-in) as bench_serving would import them."""
    r = subprocess.run(
        [str(python), "-c", CHECK],
        capture_output=True,
        text=True,
        timeout=600,
        env=bench_env(site, dict(os.environ)),
        cwd=site,
        check=False,
    )
    words = r.stdout.split()
    if r.returncode != 0 or len(words) != 2:
        last = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()][-1:]
        raise ExtrasError(f"bench_serving does not import with {site} on its path: {last}")
    return words[0], words[1] == "1"


def ensure_extras(python: Path, venv_root: Path, say: Callable[[str], None] = print) -> Extras:
    """The overlay's site folder for the venv at venv_root (whose python is `python`): cached, or installed
    now (~1 min, ~260 MB)."""
    folder = overlay_dir(venv_root)
    site = folder / "site"
    with build_lock(folder):
        with contextlib.suppress(OSError, ValueError, KeyError):
            return Extras(site, bool(json.loads((folder / "built.json").read_text())["torchvision_stand_in"]))
        say(
            f"[bench-extras] installing {', '.join(pins())} ({LOCK.name}, --no-deps) into {site} for SGLang's"
            " bench_serving, once (~1 min); the SGLang venv is not changed ..."
        )
        t0 = time.monotonic()
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        log = folder / "install.log"
        cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
        cmd += ["--target", str(site), "-r", str(LOCK)]
        with log.open("w") as fh:
            r = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S, check=False
            )
        if r.returncode != 0:
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-2:]
            raise ExtrasError(
                f"pip install -r {LOCK.name} exited {r.returncode} (log {log}): {' | '.join(tail)}"
            )
        version, stand_in = _check(python, site)
        seconds = round(time.monotonic() - t0, 1)
        info = {"pins": pins(), "datasets": version, "torchvision_stand_in": stand_in, "seconds": seconds}
        (folder / "built.json").write_text(json.dumps(info, indent=2) + "\n")
        say(f"[bench-extras] ready in {seconds:.0f} s (datasets {version})")
        return Extras(site, stand_in)
