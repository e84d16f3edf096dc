"""tlru's config checked in the spec, per expanded server profile, before any server starts.

SGLang 0.5.23 refuses `--radix-eviction-policy tlru` at startup unless `threshold` > `next_prompt_estimate`
(both default 0: arg_groups/kv_cache_hook.py; mem_cache/evict_policy.py `TLRUStrategy` is LRU otherwise);
a matrix sweep over the two would otherwise fail one server at a time, minutes in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.errors import SpecError
from harness.spec.flags import flag_value

POLICY_FLAG = "--radix-eviction-policy"
CONFIG_FLAG = "--radix-eviction-policy-config"


def check_tlru(args: Sequence[str], f: str, key: str) -> None:
    """SpecError (one line naming the profile's args) when a tlru profile's config would be refused."""
    if (flag_value(args, POLICY_FLAG) or "").lower() != "tlru":
        return
    raw = flag_value(args, CONFIG_FLAG)
    config: object = {}
    if raw is not None:
        try:
            config = json.loads(raw)
        except json.JSONDecodeError:
            raise SpecError(f, f"{key}.args", f"{CONFIG_FLAG} is not JSON: {raw!r}") from None
    if not isinstance(config, dict):
        raise SpecError(f, f"{key}.args", f"{CONFIG_FLAG} expected a JSON object, got {raw!r}")
    values = {}
    for name in ("threshold", "next_prompt_estimate"):
        v = config.get(name, 0)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise SpecError(f, f"{key}.args", f"tlru's {name} expected a non-negative integer, got {v!r}")
        values[name] = v
    t, q = values["threshold"], values["next_prompt_estimate"]
    if t <= q:
        raise SpecError(
            f,
            f"{key}.args",
            f"tlru needs threshold > next_prompt_estimate (SGLang refuses it), got threshold {t} <= "
            f"next_prompt_estimate {q}",
        )
