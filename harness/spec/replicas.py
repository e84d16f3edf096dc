"""A profile's `replicas: N`, `router:` and `storage:` keys: N workers behind SGLang's gateway (smg).

`router:` takes `policy` (smg's `--policy`) and any other smg flag as a key (`cache_threshold: 0.5` is
`--cache-threshold 0.5`, `true` a bare flag). The gateway's host, port, worker list and Prometheus port
are the harness's to choose. `storage: shared` points every worker's L3 file backend at one directory.
Values may be `{key}` placeholders filled from the matrix, checked once filled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from harness.errors import SpecError
from harness.spec.router_policies import DEFAULT_POLICY, ROUTER_POLICIES, policy_list

STORAGE_MODES = ("own", "shared")
MAX_REPLICAS = 64
# chosen by the harness at run time, or meaningless for a plain worker list
_RESERVED = {
    "host": "the gateway binds to the profile's host",
    "port": "the port is chosen at run time",
    "worker_urls": "the workers are the profile's replicas",
    "prometheus_port": "a free port is chosen at run time (two gateways on one host would share 29000)",
    "prometheus_host": "the gateway's metrics bind to the profile's host",
    "pd_disaggregation": "prefill/decode split workers are not a replicas profile",
    "service_discovery": "the workers are the profile's replicas",
}
_FLAG_KEY = re.compile(r"[a-z][a-z0-9_-]*")


@dataclass(frozen=True)
class RouterSpec:
    """The gateway's policy and flags, as written (strings may hold `{key}` until the matrix fills them)."""

    policy: str = DEFAULT_POLICY
    options: tuple[tuple[str, str], ...] = ()  # (flag without dashes, value; "" for a bare flag)

    def argv(self) -> list[str]:
        """smg launch flags for the policy and options (host, port, workers: harness.servers.replicas)."""
        out = ["--policy", self.policy]
        for k, v in self.options:
            out += [f"--{k.replace('_', '-')}", *([v] if v != "" else [])]
        return out

    def texts(self) -> list[tuple[str, str]]:
        """(text, key path) of every value, for placeholder checks and filling."""
        return [(self.policy, "router.policy"), *((v, f"router.{k}") for k, v in self.options)]


def parse_replicas(item: dict[str, Any], launch: str, f: str, key: str) -> dict[str, Any]:
    """The three keys of one `servers[i]` entry, as ServerProfile fields ({} when none is given)."""
    if not any(k in item for k in ("replicas", "router", "storage")):
        return {}
    if launch == "attach":
        raise SpecError(f, f"{key}.replicas", "not for launch: attach (attach to the gateway's URL instead)")
    raw = item.get("replicas", 1 if "router" in item else None)
    if raw is None:
        raise SpecError(f, f"{key}.storage", "only with replicas: N (one server has its own storage)")
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise SpecError(f, f"{key}.replicas", f"expected a whole number of workers, got {raw!r}")
    out: dict[str, Any] = {"replicas": str(raw), "router": _parse_router(item.get("router"), f, key)}
    storage = item.get("storage", "own")
    if storage not in STORAGE_MODES:
        raise SpecError(f, f"{key}.storage", f"expected one of {', '.join(STORAGE_MODES)}, got {storage!r}")
    out["storage"] = storage
    if not any("{" in t for t, _ in [(str(raw), ""), *out["router"].texts()]):
        check_filled(str(raw), out["router"], f, key)  # else once the matrix fills them (parse_servers)
    return out


def _parse_router(raw: Any, f: str, key: str) -> RouterSpec:
    if raw is None:
        return RouterSpec()
    if not isinstance(raw, dict):
        raise SpecError(f, f"{key}.router", f"expected a mapping (policy: and smg flags), got {raw!r}")
    policy = raw.get("policy", DEFAULT_POLICY)
    if not isinstance(policy, str):
        raise SpecError(f, f"{key}.router.policy", f"expected one of {policy_list()}")
    options: list[tuple[str, str]] = []
    for k, v in raw.items():
        if k == "policy":
            continue
        where = f"{key}.router.{k}"
        if not isinstance(k, str) or not _FLAG_KEY.fullmatch(k):
            raise SpecError(f, where, "expected an smg flag name (cache_threshold for --cache-threshold)")
        norm = k.replace("-", "_")
        if norm in _RESERVED:
            raise SpecError(f, where, f"not allowed here: {_RESERVED[norm]}")
        if v is True:
            options.append((norm, ""))
        elif v is False or v is None:
            continue  # a flag left off
        elif isinstance(v, str | int | float) and str(v) != "":
            options.append((norm, str(v)))
        else:
            raise SpecError(f, where, f"expected a string, number or true, got {v!r}")
    return RouterSpec(policy, tuple(options))


def check_filled(replicas: str, router: RouterSpec, f: str, key: str) -> int:
    """The worker count once placeholders are filled; the policy must be one smg routes by."""
    try:
        n = int(replicas)
    except ValueError:
        raise SpecError(
            f, f"{key}.replicas", f"expected a whole number of workers, got {replicas!r}"
        ) from None
    if not 1 <= n <= MAX_REPLICAS:
        raise SpecError(f, f"{key}.replicas", f"expected 1 to {MAX_REPLICAS} workers, got {n}")
    if router.policy not in ROUTER_POLICIES:
        raise SpecError(f, f"{key}.router.policy", f"expected one of {policy_list()}, got {router.policy!r}")
    return n


def fill_router(router: RouterSpec, sub: Any) -> RouterSpec:
    """The router with every value's placeholders filled by `sub` (str -> str)."""
    return RouterSpec(sub(router.policy), tuple((k, sub(v)) for k, v in router.options))
