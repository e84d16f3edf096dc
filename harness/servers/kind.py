"""What `launch: sglang` profiles run as here: SGLang when it imports and NVML sees a GPU, else the sim."""

from __future__ import annotations

from harness.errors import HarnessError
from harness.spec.engines import ENGINE_LAUNCHES, engine_of

# `--server-kind`: auto, SGLang (on a GPU, or its own server on this CPU), or any other engine that launches
OTHER_ENGINES: tuple[str, ...] = tuple(n for n in ENGINE_LAUNCHES if n != "sglang")
SERVER_KINDS: tuple[str, ...] = ("auto", "sglang", "sglang-cpu", *OTHER_ENGINES)
# those a `launch: sglang` profile keeps its SGLang flags on: SGLang's own, an engine that takes them (the
# sim), or auto's pick of those (a fleet group's kinds: its suites are such profiles, harness.fleet.config)
SGLANG_FLAG_KINDS: tuple[str, ...] = tuple(
    k for k in SERVER_KINDS if (e := engine_of(k)) is None or e.sglang_args
)

SGLANG_CHECKED = "0.5.23"  # the SGLang version the harness is checked against (README's GPU steps)


def choose_kind(requested: str, sglang_python: str | None = None, dry_run: bool = False) -> tuple[str, str]:
    """(kind, why) for `launch: sglang` profiles; requested is one of SERVER_KINDS. A dry run of
    --server-kind sglang plans without SGLang installed (it only prints the launch lines) and says so."""
    if requested == "sglang-cpu":
        return "sglang-cpu", _sglang_cpu_why(sglang_python)
    engine = engine_of(requested)
    if requested in OTHER_ENGINES and engine is not None:
        dropped = "" if engine.sglang_args else " (SGLang flags in `launch: sglang` profiles are dropped)"
        return requested, f"asked for with --server-kind {requested}{dropped}"
    gpu_line = _gpu_visible()
    sglang_ok, sglang_why = (
        _sglang_importable() if requested == "sglang" or gpu_line[0] else (False, "not checked")
    )
    if requested == "sglang":
        if not sglang_ok and dry_run:
            return "sglang", (
                f"asked for with --server-kind sglang; SGLang is missing here ({sglang_why}): install "
                f"sglang=={SGLANG_CHECKED} before a real run"
            )
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


def sglang_cpu_python(given: str | None) -> str:
    """The interpreter a CPU run uses: the one given, else the venv `make bench-sglang` builds."""
    if given:
        return given
    from harness.servers.sglang_cpu.venv import cached_env

    found = cached_env()
    if found is None:
        raise HarnessError(
            "--server-kind sglang-cpu: no SGLang CPU venv is built (run `make bench-sglang`, or "
            "`python -m harness.servers.sglang_cpu.venv`, or pass --sglang-python PATH)"
        )
    return str(found.python)


def _sglang_cpu_why(given: str | None) -> str:
    import subprocess

    py = sglang_cpu_python(given)
    probe = "import importlib.metadata as m; print(m.version('sglang'))"
    try:
        r = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    except OSError as e:
        raise HarnessError(f"--sglang-python: cannot run {py!r}: {e.strerror or e}") from None
    if r.returncode != 0:
        raise HarnessError(f"--sglang-python: {py} has no sglang installed (pip install sglang into it)")
    return (
        f"asked for with --server-kind sglang-cpu: SGLang {r.stdout.strip()} from {py} on the CPU "
        "(CPU flags and import-time stand-ins added; docs/real-sglang.md)"
    )


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
