"""The traffic keys any workload takes: `priorities:` (request classes with SGLang's `priority` value) and
`salt: per-request` (the zero-reuse control); each bad value is one SpecError line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from harness.errors import SpecError
from harness.spec.checks import no_unknown, req, tname

SALTS = ("per-request",)
_CLASS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# SGLang 0.5.23 keeps `priority` in a torch int64 (mem_cache/radix_cache.py `_insert_cache`)
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class PriorityClass:
    """One request class: its share of sessions (or groups) and the `priority` its requests carry."""

    name: str
    share: float
    value: int


def parse_priorities(v: Any, f: str) -> tuple[PriorityClass, ...]:
    """`priorities: [{name, share, value}, ...]`; shares are weights (need not sum to 1)."""
    if v is None:
        return ()
    if not isinstance(v, list) or not v:
        raise SpecError(f, "priorities", f"expected a non-empty list of {{name, share, value}}, got {v!r}")
    out: list[PriorityClass] = []
    for i, item in enumerate(v):
        key = f"priorities[{i}]"
        if not isinstance(item, dict):
            raise SpecError(f, key, f"expected a mapping with name, share and value, got {tname(item)}")
        no_unknown(item, {"name", "share", "value"}, f, key)
        name = req(item, "name", f, key)
        if not isinstance(name, str) or not _CLASS_NAME.fullmatch(name):
            raise SpecError(
                f, f"{key}.name", f"expected a name of letters, digits, '.', '_' or '-', got {name!r}"
            )
        share = req(item, "share", f, key)
        if (
            not isinstance(share, int | float)
            or isinstance(share, bool)
            or not math.isfinite(share)
            or share <= 0
        ):
            raise SpecError(f, f"{key}.share", f"expected a positive number, got {share!r}")
        value = req(item, "value", f, key)
        if not isinstance(value, int) or isinstance(value, bool) or not _INT64[0] <= value <= _INT64[1]:
            raise SpecError(f, f"{key}.value", f"expected an integer (SGLang's priority), got {value!r}")
        if any(c.name == name for c in out):
            raise SpecError(f, f"{key}.name", f"{name!r} is already used by another class")
        out.append(PriorityClass(name=name, share=float(share), value=value))
    return tuple(out)


def parse_salt(v: Any, f: str, api: str) -> str | None:
    """`salt: per-request`: every prompt made unique from its first token (no prefix is ever shared).
    Not with openai-chat: the server's chat template puts its own tokens first, shared by every prompt."""
    if v is None:
        return None
    if v not in SALTS:
        raise SpecError(f, "salt", f"expected one of {', '.join(SALTS)}, got {v!r}")
    if api == "openai-chat":
        raise SpecError(
            f,
            "salt",
            f"{v} needs a prompt sent whole (api: openai-completions or sglang-generate); with openai-chat "
            "the server's chat template puts its own first tokens before the salt",
        )
    return str(v)
