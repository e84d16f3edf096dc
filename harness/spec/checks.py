"""The checks every spec key goes through: each bad value is a SpecError naming the file and key."""

from __future__ import annotations

from typing import Any

from harness.errors import SpecError


def tname(v: Any) -> str:
    return "nothing" if v is None else type(v).__name__


def req(d: dict, k: str, f: str, parent: str) -> Any:
    if k not in d:
        raise SpecError(f, f"{parent}.{k}" if parent else k, "missing (required)")
    return d[k]


def no_unknown(d: dict, allowed: set[str], f: str, parent: str) -> None:
    for k in d:
        if k not in allowed:
            raise SpecError(
                f,
                f"{parent}.{k}" if parent else str(k),
                f"unknown key (expected one of: {', '.join(sorted(allowed))})",
            )


def pos_int(v: Any, f: str, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise SpecError(f, key, f"expected a positive integer, got {v!r}")
    return v


def nonneg_int(v: Any, f: str, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise SpecError(f, key, f"expected a non-negative integer, got {v!r}")
    return v


def pos_float(v: Any, f: str, key: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
        raise SpecError(f, key, f"expected a positive number, got {v!r}")
    return float(v)
