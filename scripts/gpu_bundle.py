"""Build the wheel folder `make gpu-check` installs on a GPU node with `pip --no-index` (the node has no network).

The node's image has torch + CUDA, transformers, nvidia-ml-py, pandas, httpx, aiohttp, rich, pyyaml, uvloop and
matplotlib; this folder brings the harness wheel and what the image lacks: pydantic (the harness's summary
types), orjson (the client's fast JSON), and what `transformers serve` needs beyond transformers (fastapi,
uvicorn, openai, accelerate for its device map) with their own small dependencies. Binary wheels are CPython
3.12 manylinux x86_64. The folder travels with the checkout (at most 64 MiB: its size is printed and checked).

    .venv/bin/python scripts/gpu_bundle.py [--out gpu-bundle]      (what `make gpu-bundle` runs)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 64
# pinned to the versions the SGLang CPU lock holds (transformers 5.19 serves with them there), accelerate aside
PINS = (
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",  # pydantic 2.14 needs >= 4.16; the image's may be older
    "orjson==3.13.0",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "annotated-doc==0.0.7",
    "uvicorn==0.54.0",
    "h11==0.16.0",
    "openai==2.8.0",
    "jiter==0.19.0",
    "distro==1.9.0",
    "sniffio==1.3.1",
    "accelerate==1.15.0",
    "psutil==7.2.2",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def _pip(args: list[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        tail = " | ".join(ln for ln in (r.stdout + r.stderr).strip().splitlines()[-3:])
        raise SystemExit(f"gpu-bundle: pip {args[0]} failed: {tail}")


def build(out: Path, python_version: str = "3.12") -> dict:
    """The folder, emptied of older wheels first; returns what bundle.json records. `python_version` other
    than 3.12 only for a rehearsal of the check on this machine's Python (scripts/gpu_check.py --device cpu)."""
    tag = "cp" + python_version.replace(".", "")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    _pip(["wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)])
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    _pip(
        [
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            *plat,
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            "--abi",
            tag,
            "--abi",
            "abi3",
            "--abi",
            "none",
            "-d",
            str(out),
            *PINS,
        ]
    )
    wheels = sorted(out.glob("*.whl"))
    sizes = {w.name: w.stat().st_size for w in wheels}
    info = {"pins": list(PINS), "python": tag, "platforms": list(PLATFORMS), "wheels": sizes}
    info["bytes"] = sum(sizes.values())
    (out / "bundle.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-bundle")
    ap.add_argument("--python-version", default="3.12", help="the node's Python (the H200 image: 3.12)")
    args = ap.parse_args()
    info = build(args.out, args.python_version)
    mib = sum(f.stat().st_size for f in args.out.iterdir() if f.is_file()) / 2**20
    ok = mib <= LIMIT_MIB
    print(
        f"gpu-bundle: {len(info['wheels'])} wheels, {mib:.1f} MiB (limit {LIMIT_MIB} MiB) in {args.out}"
        + ("" if ok else ": too big to travel with the checkout")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
