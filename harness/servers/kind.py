"""What `launch: sglang` profiles run as here: SGLang when it imports and NVML sees a GPU, else the sim."""

from __future__ import annotations

from harness.errors import HarnessError


def choose_kind(requested: str) -> tuple[str, str]:
    """(kind, why) for `launch: sglang` profiles; requested is auto, sglang, sim or vllm."""
    if requested == "sim":
        return "sim", "asked for with --server-kind sim"
    if requested == "vllm":
        return (
            "vllm",
            "asked for with --server-kind vllm (SGLang flags in `launch: sglang` profiles are dropped)",
        )
    gpu_line = _gpu_visible()
    sglang_ok, sglang_why = (
        _sglang_importable() if requested == "sglang" or gpu_line[0] else (False, "not checked")
    )
    if requested == "sglang":
        if not sglang_ok:
            raise HarnessError(
                f"--server-kind sglang: {sglang_why} (pip install sglang, or use --server-kind sim)"
            )
        return "sglang", "asked for with --server-kind sglang"
    if gpu_line[0] and sglang_ok:
        return "sglang", f"sglang imports and NVML sees {gpu_line[1]}"
    if not gpu_line[0]:
        return "sim", f"no GPU visible ({gpu_line[1]})"
    return "sim", f"sglang is not usable here ({sglang_why})"


def _gpu_visible() -> tuple[bool, str]:
    try:
        from harness.telemetry.gpus import snapshot

        snap = snapshot()
    except Exception as e:  # noqa: BLE001
        return False, f"NVML check failed: {type(e).__name__}: {e}"
    gpus = snap.get("gpus") or []
    if gpus:
        names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict)})
        return True, f"{len(gpus)} GPU(s): {', '.join(names)}"
    return False, str(snap.get("status") or "NVML sees no GPU")


def _sglang_importable() -> tuple[bool, str]:
    try:
        import sglang  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means we cannot launch it
        return False, f"import sglang failed: {type(e).__name__}: {e}"
    return True, "ok"
