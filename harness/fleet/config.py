"""The fleet file (`harness fleet FLEET.yaml`): node groups and what each runs, validated before Ray starts.

Every error is `SpecError(file, key.path, what was expected)`, printed as one line with exit 2, like a
spec's. Spec paths are relative to the fleet file's folder; `capture` and `summaries` to the current one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import SpecError
from harness.servers.kind import SGLANG_FLAG_KINDS
from harness.sweep.suites import SUITES, suite_files

TOP_KEYS = {
    "ray_address",
    "capture",
    "summaries",
    "retries",
    "stream_every_s",
    "node_wait_s",
    "runtime_env",
    "nodes",
}
NODE_KEYS = {
    "name",
    "resources",
    "gpus",
    "cpus",
    "suite",
    "specs",
    "model",
    "server_kind",
    "servers",
    "bench_args",
}
SERVER_KINDS = SGLANG_FLAG_KINDS  # a group's `server_kind:`: one its suites' `launch: sglang` profiles run on
_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# `harness bench` flags the fleet sets itself for every unit
_FLEET_FLAGS = {
    "--node": "the group's name is the node name",
    "--capture": "set `capture:` at the top of the fleet file",
    "--summaries": "set `summaries:` at the top of the fleet file",
    "--suite": "set `suite:` in the group",
    "--spec": "set `specs:` in the group",
    "--server-kind": "set `server_kind:` in the group",
    "--model": "set `model:` in the group",
    "--server": "set `servers:` in the group (each server profile is its own unit)",
    "--only": "a fleet unit runs every point of its specs (resume decides what is left)",
    "--dry-run": "not a fleet run",
}


@dataclass(frozen=True)
class NodeGroup:
    """One kind of node: what a Ray node must offer to run it, and what `harness bench` runs there."""

    name: str
    resources: dict[str, float]
    gpus: float
    cpus: float
    specs: tuple[Path, ...]  # resolved: a suite's files, or the listed specs
    suite: str | None
    model: str | None
    server_kind: str
    servers: tuple[str, ...]  # profile names (globs) to run; empty = every profile
    bench_args: tuple[str, ...]


@dataclass(frozen=True)
class FleetFile:
    path: Path
    ray_address: str
    capture: Path
    summaries: Path
    retries: int
    stream_every_s: float
    node_wait_s: float
    runtime_env: dict[str, Any] | None
    nodes: tuple[NodeGroup, ...] = field(default_factory=tuple)


def load_fleet(path: Path) -> FleetFile:
    """Read and validate a fleet file; the first problem found is raised as one line."""
    path = Path(path)
    f = str(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SpecError(f, "", f"cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise SpecError(f, "", f"{where}not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(raw, dict):
        raise SpecError(f, "", f"expected a mapping with `nodes`, got {_tname(raw)}")
    for k in raw:
        if k not in TOP_KEYS:
            raise SpecError(f, str(k), f"unknown key (expected one of {', '.join(sorted(TOP_KEYS))})")
    address = raw.get("ray_address", "auto")
    if not isinstance(address, str) or not address.strip():
        raise SpecError(f, "ray_address", f"expected auto, local or a cluster address, got {address!r}")
    runtime_env = raw.get("runtime_env")
    if runtime_env is not None and not isinstance(runtime_env, dict):
        raise SpecError(
            f, "runtime_env", f"expected a mapping (Ray's runtime_env), got {_tname(runtime_env)}"
        )
    nodes_raw = raw.get("nodes")
    if not isinstance(nodes_raw, list) or not nodes_raw:
        raise SpecError(f, "nodes", f"expected a non-empty list of node groups, got {nodes_raw!r}")
    groups: list[NodeGroup] = []
    for i, item in enumerate(nodes_raw):
        g = _parse_group(item, f, f"nodes[{i}]", path.parent)
        if any(o.name == g.name for o in groups):
            raise SpecError(f, f"nodes[{i}].name", f"{g.name!r} is already used by another group")
        groups.append(g)
    return FleetFile(
        path=path,
        ray_address=address.strip(),
        capture=Path(_str(raw, "capture", "capture", f, "")),
        summaries=Path(_str(raw, "summaries", "summaries", f, "")),
        retries=int(_number(raw, "retries", 2, f, "", integer=True)),
        stream_every_s=_number(raw, "stream_every_s", 2.0, f, "", positive=True),
        node_wait_s=_number(raw, "node_wait_s", 60.0, f, ""),
        runtime_env=runtime_env,
        nodes=tuple(groups),
    )


def _parse_group(item: Any, f: str, key: str, base: Path) -> NodeGroup:
    if not isinstance(item, dict):
        raise SpecError(f, key, f"expected a mapping with name and resources, got {_tname(item)}")
    for k in item:
        if k not in NODE_KEYS:
            raise SpecError(f, f"{key}.{k}", f"unknown key (expected one of {', '.join(sorted(NODE_KEYS))})")
    name = item.get("name")
    if not isinstance(name, str) or not _NAME_OK.fullmatch(name):
        raise SpecError(
            f, f"{key}.name", f"expected a name of letters, digits, '.', '_' or '-', got {name!r}"
        )
    res = item.get("resources", {})
    if not isinstance(res, dict):
        raise SpecError(
            f, f"{key}.resources", f"expected a mapping of Ray resource -> amount, got {_tname(res)}"
        )
    resources: dict[str, float] = {}
    for r, amount in res.items():
        if not isinstance(r, str) or not r:
            raise SpecError(f, f"{key}.resources", f"expected resource names as strings, got {r!r}")
        if r in ("GPU", "CPU"):
            raise SpecError(f, f"{key}.resources.{r}", f"use `{r.lower()}s:` in the group instead")
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount <= 0:
            raise SpecError(f, f"{key}.resources.{r}", f"expected a positive number, got {amount!r}")
        resources[r] = float(amount)
    if "suite" in item and "specs" in item:
        raise SpecError(f, f"{key}.specs", "give either suite or specs, not both")
    suite: str | None = None
    if "specs" in item:
        specs_raw = item["specs"]
        if not isinstance(specs_raw, list) or not specs_raw or not all(isinstance(s, str) for s in specs_raw):
            raise SpecError(f, f"{key}.specs", f"expected a non-empty list of spec files, got {specs_raw!r}")
        specs = tuple((base / s).resolve() if not Path(s).is_absolute() else Path(s) for s in specs_raw)
        for j, s in enumerate(specs):
            if not s.is_file():
                raise SpecError(f, f"{key}.specs[{j}]", f"{s} does not exist")
    else:
        suite = item.get("suite", "default")
        if suite not in SUITES:
            raise SpecError(f, f"{key}.suite", f"expected one of {', '.join(sorted(SUITES))}, got {suite!r}")
        specs = tuple(suite_files(suite))
    kind = item.get("server_kind", "auto")
    if kind not in SERVER_KINDS:
        raise SpecError(f, f"{key}.server_kind", f"expected one of {', '.join(SERVER_KINDS)}, got {kind!r}")
    model = item.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise SpecError(f, f"{key}.model", f"expected a model path or name, got {model!r}")
    servers = item.get("servers", [])
    if not isinstance(servers, list) or not all(isinstance(s, str) and s for s in servers):
        raise SpecError(f, f"{key}.servers", f"expected a list of server profile names, got {servers!r}")
    bench_args = item.get("bench_args", [])
    if not isinstance(bench_args, list) or not all(isinstance(a, str | int | float) for a in bench_args):
        raise SpecError(
            f, f"{key}.bench_args", f"expected a list of `harness bench` arguments, got {bench_args!r}"
        )
    for a in bench_args:
        flag = str(a).split("=", 1)[0]
        if flag in _FLEET_FLAGS:
            raise SpecError(f, f"{key}.bench_args", f"{flag} is set by the fleet: {_FLEET_FLAGS[flag]}")
    return NodeGroup(
        name=name,
        resources=resources,
        gpus=_number(item, "gpus", 1, f, key),
        cpus=_number(item, "cpus", 1, f, key),
        specs=specs,
        suite=suite,
        model=model,
        server_kind=kind,
        servers=tuple(servers),
        bench_args=tuple(str(a) for a in bench_args),
    )


def _str(d: dict[str, Any], k: str, default: str, f: str, key: str) -> str:
    v = d.get(k, default)
    if not isinstance(v, str) or not v:
        raise SpecError(f, _join(key, k), f"expected a folder path, got {v!r}")
    return v


def _number(
    d: dict[str, Any],
    k: str,
    default: float,
    f: str,
    key: str,
    *,
    integer: bool = False,
    positive: bool = False,
) -> float:
    v = d.get(k, default)
    ok = not isinstance(v, bool) and isinstance(v, int if integer else int | float)
    if not ok or v < 0 or (positive and v == 0):
        what = "an integer" if integer else "a number"
        raise SpecError(f, _join(key, k), f"expected {what} {'> 0' if positive else '>= 0'}, got {v!r}")
    return float(v)


def _join(key: str, k: str) -> str:
    return f"{key}.{k}" if key else k


def _tname(v: Any) -> str:
    return "nothing" if v is None else type(v).__name__
