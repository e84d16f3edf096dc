"""The `servers` list and `matrix` of an experiment spec → validated ServerProfile objects.

`{key}` placeholders in names, args, commands, env values and URLs take matrix values; `{port}`,
`{host}` and `{model}` are filled at launch; `{env:NAME}` takes an environment variable at launch and
is treated as a secret. A profile expands over the matrix keys it mentions, so a GPU-only profile
beside a `{policy}` profile stays single.

Paths: `{cache}` (anywhere in a profile) is the harness's build cache, $HARNESS_CACHE or
~/.cache/harness (harness.paths); a leading `~` in `command[0]` and `model` is expanded, since no
shell runs the command. Both are filled when the spec is read, so dry runs and manifests show the
path that is launched.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from harness.errors import SpecError
from harness.paths import expand_path, fill_cache
from harness.spec.engines import (
    ENGINE_LAUNCHES,
    ENGINES,
    LAUNCH_KINDS,
    default_engine,
    default_ready_timeout_s,
)
from harness.spec.replicas import RouterSpec, check_filled, fill_router, parse_replicas
from harness.spec.tlru import check_tlru

RUNTIME_KEYS = ("port", "host", "model")
PROFILE_KEYS = {
    "name",
    "launch",
    "args",
    "command",
    "url",
    "host",
    "model",
    "env",
    "engine",
    "health_path",
    "ready_url",
    "ready_line",
    "ready_timeout_s",
    "python",
    "replicas",
    "router",
    "storage",
}
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*|env:[A-Za-z_][A-Za-z0-9_]*)\}")
_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
_RESERVED_FLAGS = {"--port": "the port is chosen at run time", "--host": "set `host:` in the profile"}
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class ServerProfile:
    """One server to start (or attach to), after matrix expansion; argv lists only, never shell strings."""

    name: str
    launch: str
    args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    url: str | None = None
    host: str = DEFAULT_HOST
    model: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    engine: str | None = None  # adapter name; defaults from launch
    health_path: str = "/health"
    ready_url: str | None = None
    ready_line: str | None = None  # overrides the adapter's ready line ("" = none)
    ready_timeout_s: float | None = None
    python: str | None = None  # launch: sglang only: the interpreter that has SGLang (default: the run's)
    matrix: dict[str, Any] = field(default_factory=dict)  # the combination this profile came from
    template: str = ""  # the name as written, before expansion
    # N workers behind SGLang's gateway (harness.spec.replicas); None: one server, no gateway. A str only
    # while a `{key}` placeholder waits for the matrix
    replicas: int | str | None = None
    router: RouterSpec | None = None
    storage: str = "own"  # "shared": every worker's L3 file backend in one directory

    @property
    def engine_name(self) -> str:
        return self.engine or default_engine(self.launch)

    @property
    def timeout_s(self) -> float:
        return float(self.ready_timeout_s or default_ready_timeout_s(self.launch))

    def with_launch(self, launch: str) -> ServerProfile:
        """The same profile on another engine (e.g. an SGLang profile run on the sim)."""
        return dataclasses.replace(
            self, launch=launch, engine=None if launch in ENGINE_LAUNCHES else self.engine
        )


def parse_matrix(raw: Any, f: str) -> dict[str, list[Any]]:
    """`matrix: {policy: [lru, lfu], pool: [8192, 16384]}` → ordered key → values."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(f, "matrix", f"expected a mapping of key -> list of values, got {_tname(raw)}")
    out: dict[str, list[Any]] = {}
    for k, vals in raw.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise SpecError(f, f"matrix.{k}", "expected a key of letters, digits and '_' (used as {key})")
        if k in RUNTIME_KEYS or k == "env":
            raise SpecError(f, f"matrix.{k}", f"{{{k}}} is filled at launch; pick another key name")
        if k == "cache":
            raise SpecError(f, "matrix.cache", "{cache} is the harness's build cache; pick another key name")
        if not isinstance(vals, list) or not vals:
            raise SpecError(f, f"matrix.{k}", f"expected a non-empty list of values, got {vals!r}")
        for i, v in enumerate(vals):
            if isinstance(v, bool) or not isinstance(v, str | int | float) or v == "":
                raise SpecError(f, f"matrix.{k}[{i}]", f"expected a string or number, got {v!r}")
        if len({str(v) for v in vals}) != len(vals):
            raise SpecError(f, f"matrix.{k}", f"expected distinct values, got {vals!r}")
        out[k] = list(vals)
    return out


def parse_servers(
    raw: Any, matrix_raw: Any, f: str, environ: dict[str, str] | None = None
) -> list[ServerProfile]:
    """Validate `servers` (+ `matrix`) and expand; raises SpecError naming file, key path and what was expected."""
    environ = dict(os.environ) if environ is None else environ
    matrix = parse_matrix(matrix_raw, f)
    if raw is None:
        raise SpecError(f, "servers", "missing: `harness bench` needs at least one server profile")
    if not isinstance(raw, list) or not raw:
        raise SpecError(f, "servers", f"expected a non-empty list of server profiles, got {raw!r}")
    used_keys: set[str] = set()
    out: list[ServerProfile] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(raw):
        key = f"servers[{i}]"
        base = _parse_one(item, f, key, environ)
        refs = _matrix_refs(base, matrix, f, key)
        used_keys |= set(refs)
        combos = itertools.product(*(matrix[k] for k in refs)) if refs else [()]
        for combo in combos:
            values = dict(zip(refs, combo, strict=True))
            prof = _fill(base, values)
            if not _NAME_OK.fullmatch(prof.name):
                raise SpecError(
                    f,
                    f"{key}.name",
                    f"expected a folder-safe name (letters, digits, . _ = + -), got {prof.name!r}",
                )
            _check_url(prof.url, f, f"{key}.url")
            check_tlru(prof.args, f, key)
            if prof.replicas is not None:
                assert prof.router is not None
                prof = dataclasses.replace(
                    prof, replicas=check_filled(str(prof.replicas), prof.router, f, key)
                )
            if prof.name in seen:
                hint = f" (add {{{refs[0]}}} to the name)" if refs and "{" not in base.name else ""
                raise SpecError(f, f"{key}.name", f"{prof.name!r} is already used by {seen[prof.name]}{hint}")
            seen[prof.name] = key
            out.append(prof)
    unused = [k for k in matrix if k not in used_keys]
    if unused:
        raise SpecError(
            f,
            f"matrix.{unused[0]}",
            "not used by any server profile (expected a {" + unused[0] + "} placeholder)",
        )
    return out


def _parse_one(item: Any, f: str, key: str, environ: dict[str, str]) -> ServerProfile:
    """One `servers[i]` entry, checked part by part in the order a reader meets its keys."""
    _check_keys(item, f, key)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f, f"{key}.name", f"expected a name string, got {name!r}")
    launch = item.get("launch")
    if launch not in LAUNCH_KINDS:
        raise SpecError(f, f"{key}.launch", f"expected one of {', '.join(LAUNCH_KINDS)}, got {launch!r}")
    args, command = _parse_argv(item, launch, f, key)
    url = _parse_url(item, launch, args, f, key)
    host, model = _parse_host_model(item, f, key)
    env = _parse_env(item, f, key)
    python = _parse_python(item, launch, f, key)
    engine = item.get("engine")
    if engine is not None and engine not in ENGINES:
        raise SpecError(f, f"{key}.engine", f"expected one of {', '.join(ENGINES)}, got {engine!r}")
    prof = ServerProfile(
        name=name,
        launch=launch,
        args=tuple(args),
        command=tuple(command),
        url=url,
        host=host,
        model=model,
        env=env,
        engine=engine,
        python=python,
        template=name,
        **_parse_readiness(item, f, key),
        **parse_replicas(item, launch, f, key),
    )
    _check_env_refs(prof, environ, f, key)
    return prof


def _check_keys(item: Any, f: str, key: str) -> None:
    if not isinstance(item, dict):
        raise SpecError(f, key, f"expected a mapping with name and launch, got {_tname(item)}")
    for k in item:
        if k not in PROFILE_KEYS:
            raise SpecError(
                f, f"{key}.{k}", f"unknown key (expected one of: {', '.join(sorted(PROFILE_KEYS))})"
            )


def _parse_argv(item: dict, launch: str, f: str, key: str) -> tuple[list[str], list[str]]:
    """`args` (sglang/sim flags, never --port/--host/--model-path) or `command` (launch: command, with {port})."""
    args = _str_list(item.get("args", []), f, f"{key}.args")
    command = _str_list(item.get("command", []), f, f"{key}.command")
    if launch in ENGINE_LAUNCHES:
        if command:
            raise SpecError(
                f, f"{key}.command", f"only for launch: command (this profile is launch: {launch}; use args)"
            )
        for j, a in enumerate(args):
            flag = a.split("=", 1)[0]
            if flag in _RESERVED_FLAGS:
                raise SpecError(f, f"{key}.args[{j}]", f"{flag} is not allowed here: {_RESERVED_FLAGS[flag]}")
            if flag in ENGINES[launch].model_flags:
                raise SpecError(
                    f, f"{key}.args[{j}]", f"{flag} is not allowed here: set `model:` or use --model"
                )
    args = [fill_cache(a) for a in args]
    command = [fill_cache(a) for a in command]
    if command:
        command[0] = expand_path(command[0])
    if launch == "command":
        if not command:
            raise SpecError(f, f"{key}.command", "expected a list of arguments for launch: command")
        if args:
            raise SpecError(f, f"{key}.args", "not used by launch: command (put everything in command)")
        if not any("{port}" in c for c in command):
            raise SpecError(
                f,
                f"{key}.command",
                "expected {port} somewhere in the command, so the harness picks a free port",
            )
    elif command and launch == "attach":
        raise SpecError(f, f"{key}.command", "not used by launch: attach")
    return args, command


def _parse_url(item: dict, launch: str, args: list[str], f: str, key: str) -> str | None:
    """`url`: required by launch: attach (and then no args), refused by every other launch."""
    url = item.get("url")
    if launch == "attach":
        if not isinstance(url, str) or not re.match(r"https?://[^/\s]+", url):
            raise SpecError(f, f"{key}.url", f"expected an http(s):// URL of the running server, got {url!r}")
        if args:
            raise SpecError(f, f"{key}.args", "not used by launch: attach (the server is already running)")
    elif url is not None:
        raise SpecError(f, f"{key}.url", "only for launch: attach")
    return url


def _parse_host_model(item: dict, f: str, key: str) -> tuple[str, str | None]:
    host = item.get("host", DEFAULT_HOST)
    if not isinstance(host, str) or not host or any(c.isspace() for c in host):
        raise SpecError(f, f"{key}.host", f"expected a host name or address, got {host!r}")
    model = item.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise SpecError(f, f"{key}.model", f"expected a model path or name, got {model!r}")
    return host, expand_path(model) if model is not None else None


def _parse_python(item: dict, launch: str, f: str, key: str) -> str | None:
    """`python:` names the interpreter of a venv that has SGLang (`{cache}` and `~` allowed)."""
    py = item.get("python")
    if py is None:
        return None
    if launch != "sglang":
        raise SpecError(f, f"{key}.python", f"only for launch: sglang (this profile is launch: {launch})")
    if not isinstance(py, str) or not py.strip():
        raise SpecError(f, f"{key}.python", f"expected the path of a python interpreter, got {py!r}")
    return expand_path(fill_cache(py))


def _parse_env(item: dict, f: str, key: str) -> dict[str, str]:
    env = item.get("env", {}) or {}
    if not isinstance(env, dict):
        raise SpecError(f, f"{key}.env", f"expected a mapping of variable -> value, got {_tname(env)}")
    out: dict[str, str] = {}
    for k, v in env.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise SpecError(f, f"{key}.env.{k}", "expected an environment variable name")
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise SpecError(f, f"{key}.env.{k}", f"expected a string or number, got {v!r}")
        out[k] = fill_cache(str(v))
    return out


def _parse_readiness(item: dict, f: str, key: str) -> dict[str, Any]:
    """health_path, ready_url, ready_line, ready_timeout_s: how the harness knows the server serves."""
    health_path = item.get("health_path", "/health")
    if not isinstance(health_path, str) or not health_path.startswith("/"):
        raise SpecError(f, f"{key}.health_path", f"expected a path starting with '/', got {health_path!r}")
    ready_url = item.get("ready_url")
    if ready_url is not None and (not isinstance(ready_url, str) or not re.match(r"https?://", ready_url)):
        raise SpecError(
            f, f"{key}.ready_url", f"expected an http:// URL (may contain {{port}}), got {ready_url!r}"
        )
    ready_line = item.get("ready_line")
    if ready_line is not None and not isinstance(ready_line, str):
        raise SpecError(f, f"{key}.ready_line", f"expected a string, got {ready_line!r}")
    rt = item.get("ready_timeout_s")
    if rt is not None and (isinstance(rt, bool) or not isinstance(rt, int | float) or rt <= 0):
        raise SpecError(f, f"{key}.ready_timeout_s", f"expected a positive number of seconds, got {rt!r}")
    return {
        "health_path": health_path,
        "ready_url": ready_url,
        "ready_line": ready_line,
        "ready_timeout_s": float(rt) if rt is not None else None,
    }


def _check_env_refs(prof: ServerProfile, environ: dict[str, str], f: str, key: str) -> None:
    """Every {env:NAME} the profile uses must be set now, not discovered missing at launch."""
    for text, where in _texts(prof, key):
        for m in _PLACEHOLDER.finditer(text):
            ref = m.group(1)
            if ref.startswith("env:") and ref[4:] not in environ:
                raise SpecError(f, where, f"environment variable {ref[4:]} is not set (needed by {{{ref}}})")


def _texts(p: ServerProfile, key: str) -> list[tuple[str, str]]:
    out = [(p.name, f"{key}.name")]
    out += [(a, f"{key}.args[{j}]") for j, a in enumerate(p.args)]
    out += [(a, f"{key}.command[{j}]") for j, a in enumerate(p.command)]
    out += [(v, f"{key}.env.{k}") for k, v in p.env.items()]
    out += [
        (u, f"{key}.{n}") for n, u in (("url", p.url), ("ready_url", p.ready_url), ("model", p.model)) if u
    ]
    if p.replicas is not None:
        out.append((str(p.replicas), f"{key}.replicas"))
    if p.router is not None:
        out += [(t, f"{key}.{where}") for t, where in p.router.texts()]
    return out


def _check_url(url: str | None, f: str, key: str) -> None:
    """An attach URL (after matrix filling) whose host or port cannot be parsed fails here, not mid-run."""
    if url is None:
        return
    try:
        _ = urlsplit(url).port  # raises on a bad IPv6 host or port
    except ValueError as e:
        raise SpecError(
            f, key, f"expected an http(s):// URL of the running server, got {url!r} ({e})"
        ) from None


def _matrix_refs(p: ServerProfile, matrix: dict[str, list[Any]], f: str, key: str) -> list[str]:
    refs: list[str] = []
    for text, where in _texts(p, key):
        for m in _PLACEHOLDER.finditer(text):
            ref = m.group(1)
            if ref.startswith("env:") or ref in RUNTIME_KEYS:
                continue
            if ref not in matrix:
                known = ", ".join(f"{{{k}}}" for k in [*matrix, *RUNTIME_KEYS, "env:NAME"])
                raise SpecError(f, where, f"unknown placeholder {{{ref}}} (expected one of {known})")
            if ref not in refs:
                refs.append(ref)
    return [k for k in matrix if k in refs]  # matrix order, so expansion order is the spec's


def _fill(p: ServerProfile, values: dict[str, Any]) -> ServerProfile:
    if not values:
        return p
    sub = lambda s: fill_placeholders(s, values)  # noqa: E731
    return dataclasses.replace(
        p,
        name=sub(p.name),
        args=tuple(sub(a) for a in p.args),
        command=tuple(sub(a) for a in p.command),
        env={k: sub(v) for k, v in p.env.items()},
        url=sub(p.url) if p.url else None,
        ready_url=sub(p.ready_url) if p.ready_url else None,
        model=sub(p.model) if p.model else None,
        matrix=dict(values),
        replicas=sub(str(p.replicas)) if p.replicas is not None else None,
        router=fill_router(p.router, sub) if p.router is not None else None,
    )


def fill_placeholders(text: str, values: dict[str, Any], environ: dict[str, str] | None = None) -> str:
    """Replace `{key}` for keys in values (and `{env:NAME}` when environ is given); leave others."""

    def one(m: re.Match[str]) -> str:
        ref = m.group(1)
        if ref.startswith("env:"):
            if environ is None:
                return m.group(0)
            return environ.get(ref[4:], m.group(0))
        return str(values[ref]) if ref in values else m.group(0)

    return _PLACEHOLDER.sub(one, text)


def env_refs(p: ServerProfile) -> list[str]:
    """Names of environment variables the profile pulls in with {env:NAME} (their values are secrets)."""
    return sorted(
        {
            m.group(1)[4:]
            for t, _ in _texts(p, "")
            for m in _PLACEHOLDER.finditer(t)
            if m.group(1).startswith("env:")
        }
    )


def _str_list(v: Any, f: str, key: str) -> list[str]:
    if isinstance(v, str):
        raise SpecError(
            f, key, "expected a list of arguments, not one string (commands are never run by a shell)"
        )
    if not isinstance(v, list):
        raise SpecError(f, key, f"expected a list of arguments, got {_tname(v)}")
    out = []
    for j, a in enumerate(v):
        if isinstance(a, bool) or not isinstance(a, str | int | float):
            raise SpecError(f, f"{key}[{j}]", f"expected a string or number, got {a!r}")
        out.append(str(a))
    return out


def _tname(v: Any) -> str:
    return "nothing" if v is None else type(v).__name__


@dataclass(frozen=True)
class SimSettings:
    """How an experiment runs on the sim: the card it models, its time scale and extra sim-only args."""

    card_profile: str | None = None
    time_scale: float | None = None
    args: tuple[str, ...] = ()


def parse_suite(raw: Any, f: str) -> SimSettings:
    """The spec's optional `suite:` section: `{sim: {card_profile: l4-8b, time_scale: 0.05, args: [...]}}`."""
    if raw is None:
        return SimSettings()
    if not isinstance(raw, dict):
        raise SpecError(f, "suite", f"expected a mapping with a `sim` section, got {_tname(raw)}")
    for k in raw:
        if k != "sim":
            raise SpecError(f, f"suite.{k}", "unknown key (expected one of: sim)")
    sim = raw.get("sim") or {}
    if not isinstance(sim, dict):
        raise SpecError(f, "suite.sim", f"expected a mapping, got {_tname(sim)}")
    allowed = {"card_profile", "time_scale", "args"}
    for k in sim:
        if k not in allowed:
            raise SpecError(
                f, f"suite.sim.{k}", f"unknown key (expected one of: {', '.join(sorted(allowed))})"
            )
    card = sim.get("card_profile")
    if card is not None and (not isinstance(card, str) or not card):
        raise SpecError(f, "suite.sim.card_profile", f"expected a card profile name, got {card!r}")
    ts = sim.get("time_scale")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float) or ts <= 0):
        raise SpecError(f, "suite.sim.time_scale", f"expected a positive number, got {ts!r}")
    args = _str_list(sim.get("args", []), f, "suite.sim.args")
    return SimSettings(card_profile=card, time_scale=float(ts) if ts is not None else None, args=tuple(args))
