"""How a replica group is launched: the gateway binary and its line, each worker's profile and GPUs, and
what the gateway says of its workers (harness.servers.replicas runs the group).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path

from harness.engines import no_gpu
from harness.errors import HarnessError
from harness.spec.servers import ServerProfile
from harness.telemetry.gpus import sampling_plan

SMG_VERSION = "1.13.0"  # the gateway the `router` extra pins; its policies: harness.spec.replicas
_TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")


def smg_command() -> str:
    """The gateway binary: $HARNESS_SMG, else the one beside this interpreter (the venv's), else on PATH."""
    env = os.environ.get("HARNESS_SMG")
    if env:
        return env
    beside = Path(sys.executable).parent / "smg"
    if beside.exists():
        return str(beside)
    found = shutil.which("smg")
    if found:
        return found
    raise HarnessError(
        f"replicas: need SGLang's gateway `smg` ({SMG_VERSION}): pip install 'harness[router]' "
        "(or set HARNESS_SMG to its path)"
    )


def smg_display() -> str:
    """The gateway binary for a printed line: found, or its bare name (a dry run needs no smg)."""
    try:
        return smg_command()
    except HarnessError:
        return "smg"


def worker_name(i: int) -> str:
    return f"w{i}"


def tp_size(args: tuple[str, ...]) -> int:
    """GPUs one worker takes: its tensor-parallel size (1 unless a flag says otherwise)."""
    for i, a in enumerate(args):
        flag, eq, val = a.partition("=")
        if flag in _TP_FLAGS:
            raw = val if eq else (args[i + 1] if i + 1 < len(args) else "1")
            try:
                return max(1, int(raw))
            except ValueError:
                return 1
    return 1


def gpu_split(profile: ServerProfile, visible: list[str] | None) -> list[str | None]:
    """Each worker's CUDA_VISIBLE_DEVICES: consecutive slices of the GPUs the profile may use (None: no
    GPU to split, e.g. the sim or a CPU run); refused in one line when replicas x tp exceed them."""
    n = int(profile.replicas or 1)
    if visible is None:
        return [None] * n
    tp = tp_size(profile.args)
    if n * tp > len(visible):
        raise HarnessError(
            f"server {profile.name}: replicas {n} x tensor parallel {tp} needs {n * tp} GPUs; "
            f"{len(visible)} visible ({', '.join(visible) or 'none'})"
        )
    return [",".join(visible[i * tp : (i + 1) * tp]) for i in range(n)]


def plan_gpus(profile: ServerProfile) -> list[str | None]:
    """Each worker's GPUs at plan time: the profile's visible GPUs (all NVML sees when it names none) split
    by replicas x tensor parallel; the sim and CPU runs get None each."""
    selectors, _reason = sampling_plan(no_gpu(profile), profile.env, profile.args)
    if selectors == []:
        return gpu_split(profile, None)
    return gpu_split(profile, selectors if selectors is not None else _nvml_indices())


def _nvml_indices() -> list[str]:
    """Every GPU NVML sees, by index ([] without NVML or a driver)."""
    from harness.telemetry import nvml

    nv, _why = nvml.load()
    if nv is None or nvml.init(nv) is not None:
        return []
    try:
        return [str(i) for i in range(int(nv.nvmlDeviceGetCount()))]
    except Exception:
        return []
    finally:
        nvml.shutdown(nv)


def worker_profile(profile: ServerProfile, i: int, gpus: str | None) -> ServerProfile:
    """Worker i of a replicas profile: the same launch, its own GPUs; no router keys."""
    env = dict(profile.env)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return dataclasses.replace(
        profile, name=f"{profile.name}/{worker_name(i)}", replicas=None, router=None, env=env
    )


def router_argv(
    profile: ServerProfile, urls: list[str], port: int | str, prom_port: int | str, binary: str | None = None
) -> list[str]:
    """The gateway's launch line: the profile's host, the workers, the policy and flags of `router:`."""
    assert profile.router is not None
    host = profile.host
    return [
        binary or smg_command(),
        "launch",
        "--host",
        host,
        "--port",
        str(port),
        "--worker-urls",
        *urls,
        "--prometheus-host",
        host,
        "--prometheus-port",
        str(prom_port),
        *profile.router.argv(),
    ]


def gateway_workers(base_url: str, headers: dict[str, str] | None = None) -> dict[str, bool]:
    """The gateway's workers: URL -> healthy, from smg's GET /workers ({} when it does not answer)."""
    req = urllib.request.Request(base_url + "/workers", headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=2.0) as resp:
            body = json.loads(resp.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    items = body.get("workers") if isinstance(body, dict) else None
    out: dict[str, bool] = {}
    for w in items or []:
        if isinstance(w, dict) and isinstance(w.get("url"), str):
            out[w["url"].rstrip("/")] = bool(w.get("is_healthy", w.get("healthy")))
    return out
