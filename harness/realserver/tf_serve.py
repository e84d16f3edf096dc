"""`transformers serve` (transformers' own OpenAI-compatible server) through an ordinary `launch: command`
profile: one spec for the CPU (every CI run, a tiny model) and for a GPU node (`make gpu-check`: cuda:0,
a 1-3 B model). A GPU-backed server nobody here wrote, and one whose wheels fit beside the checkout.

It needs fastapi, uvicorn, pydantic, openai and accelerate (its device map) beside torch + transformers.
On the CPU the SGLang CPU venv has all but accelerate, which goes into a small cached folder put on the
server's PYTHONPATH; on a GPU node the `make gpu-bundle` folder brings what the image lacks.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness.paths import cache_root
from harness.realserver.hf_model import HfModel, make_hf_model
from harness.realserver.model import ModelShape
from harness.realserver.prepare import PrepareError, locked

ACCELERATE_PIN = "accelerate==1.15.0"
# big enough to load an H200 (about 1.65 B parameters, 3.3 GB in bf16), small enough to make in seconds there
GPU_SHAPE = ModelShape(hidden=2048, layers=24, heads=16, ffn=8192, vocab=8192, context=16384)
TINY_SHAPE = ModelShape(hidden=64, layers=2, heads=4, ffn=256, vocab=8192, context=8192)  # the CPU rehearsal
Log = Callable[[str], None]


def accelerate_dir() -> Path:
    return cache_root() / f"tf-serve-{ACCELERATE_PIN.replace('==', '-')}"


def cpu_extras(python: Path, log: Log | None = print) -> Path:
    """{cache}/tf-serve-accelerate-<version>: accelerate alone (--no-deps), for `python` (a venv that has the
    rest); installed once, reused after. Its one line says what it is doing."""
    folder = accelerate_dir()
    done = folder / "installed"
    with locked(folder.parent / f".{folder.name}"):
        if done.is_file():
            return folder
        if log:
            log(
                f"[tf-serve] installing {ACCELERATE_PIN} (no deps, ~4 MB) into {folder} for transformers serve"
            )
        r = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder), ACCELERATE_PIN],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if r.returncode != 0:
            tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-2:])
            raise PrepareError("tf-serve", f"pip install {ACCELERATE_PIN} failed: {tail}")
        done.write_text(ACCELERATE_PIN + "\n")
    return folder


def serve_model(
    python: Path,
    shape: ModelShape,
    folder: Path,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    log: Log | None = print,
) -> HfModel:
    """A random-weight Llama for transformers serve, made by `python` (torch + transformers) into `folder`.

    Its generation_config.json names no EOS token: the harness asks for exactly `max_tokens` and transformers
    serve refuses `ignore_eos`, so a random model that happened to pick its EOS id would end an answer early."""
    model = make_hf_model(python, shape, log, folder=folder, dtype=dtype, device=device)
    gen = model.folder / "generation_config.json"
    if gen.is_file():
        cfg = json.loads(gen.read_text())
        if cfg.pop("eos_token_id", None) is not None:
            gen.write_text(json.dumps(cfg, indent=2) + "\n")
    return model


def serve_model_dir(shape: ModelShape) -> Path:
    return cache_root() / f"tf-serve-llama-{shape.key}-c{shape.context}"


def serve_profile(
    python: str | Path,
    model: Path,
    device: str,
    *,
    pythonpath: str | None = None,
    hub_cache: Path | None = None,
    continuous_batching: bool = False,
    name: str = "transformers",
    ready_timeout_s: float = 120,
    module: str = "transformers.cli.transformers",
) -> dict[str, Any]:
    """The `launch: command` profile: `python -m transformers.cli.transformers serve MODEL` on 127.0.0.1.

    Offline (HF_HUB_OFFLINE=1); `hub_cache` an empty folder so /v1/models answers instead of failing on a
    missing hub cache; `--log-level info` so server.log holds one line per request."""
    argv = [str(python), "-m", module, "serve", "{model}", "--device", device]
    argv += ["--host", "{host}", "--port", "{port}", "--log-level", "info"]
    if continuous_batching:
        argv.append("--continuous-batching")
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if hub_cache is not None:
        env["HF_HUB_CACHE"] = str(hub_cache)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return {
        "name": name,
        "launch": "command",
        "engine": "transformers",
        "model": str(model),
        "command": argv,
        "env": env,
        "health_path": "/health",
        "ready_timeout_s": ready_timeout_s,
    }


def check_spec(
    profile: dict[str, Any],
    tokenizer: Path,
    *,
    name: str = "tf-serve",
    groups: int = 4,
    prompts_per_group: int = 4,
    system_prompt_tokens: int = 256,
    output_tokens: int = 8,
    concurrency: int = 4,
) -> dict[str, Any]:
    """A short working-set spec (shared-prefix groups) against the one profile; exact-length prompts from the
    model's own tokenizer.json. One point: transformers serve has no cache reset, so a second point on the
    same server would start warm (`warm-start`), as llama-server's specs say too."""
    return {
        "name": name,
        "description": "transformers serve through a launch: command profile (docs/telemetry.md#gpu-node-check)",
        "api": "openai-chat",
        "model": profile["model"],
        "tokenizer": str(tokenizer),
        "concurrency": concurrency,
        "ignore_eos": False,  # transformers serve refuses fields it does not know (HTTP 422)
        "seeds": [0],
        "workload": {
            "kind": "shared-prefix",
            "groups": groups,
            "prompts_per_group": prompts_per_group,
            "system_prompt_tokens": system_prompt_tokens,
            "question_tokens": 32,
            "output_tokens": output_tokens,
        },
        "timeouts": {"connect": 10, "first_token": 120, "total": 240},
        "servers": [profile],
    }


def write_spec(path: Path, spec: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
