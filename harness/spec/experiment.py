"""One experiment spec: the YAML file read, its top-level keys and sweep checked, the points it runs."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import SpecError
from harness.paths import expand_path
from harness.spec.agent import AGENT_SWEEP_KEYS
from harness.spec.checks import no_unknown, nonneg_int, pos_float, pos_int, req, tname
from harness.spec.load import LOAD_KEYS, LoadSettings, parse_load_settings
from harness.spec.search import SearchSpec, parse_search
from harness.spec.servers import ServerProfile, SimSettings, parse_servers, parse_suite
from harness.spec.traffic import PriorityClass, parse_priorities, parse_salt
from harness.spec.workload import (
    HISTORY_MODES,
    MULTI_TURN_KEYS,
    SHARED_PREFIX_KEYS,
    TRACE_HISTORY,
    TRACE_TIMESTAMPS,
    MultiTurnWorkload,
    TraceWorkload,
    Workload,
    parse_question,
    parse_workload,
    sweep_label,
)

APIS = ("openai-chat", "openai-completions", "sglang-generate")


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


TOP_KEYS = {
    "name",
    "description",
    "api",
    "model",
    "tokenizer",
    "concurrency",
    "workers",
    "seeds",
    "workload",
    "sweep",
    "request_rate",
    "timeouts",
    "headers",
    "max_failed_fraction",
    "servers",
    "matrix",
    "suite",
    "search",
    "priorities",
    "salt",
    *LOAD_KEYS,
}


# sweep may also vary these top-level run settings, not only workload keys
SWEEPABLE_TOP = ("concurrency", "request_rate")


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0
    first_token: float = 300.0
    total: float = 600.0
    # requests in flight and no token from any of them for this long: the point fails at once (`stalled`,
    # docs/faults.md); under first_token so a hung server is named long before each request times out
    stall: float = 120.0


@dataclass(frozen=True)
class Point:
    """One sweep point: the sweep values that name it, and the workload/run settings they produce."""

    sweep: dict[str, Any]
    workload: Workload
    concurrency: int
    request_rate: float | None


@dataclass
class ExperimentSpec:
    name: str
    api: str
    model: str
    tokenizer: str
    concurrency: int
    seeds: list[int]
    workload: Workload
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    request_rate: float | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    headers: dict[str, str] = field(default_factory=dict)  # raw, may hold ${ENV} references
    max_failed_fraction: float = 0.05
    load: LoadSettings = field(default_factory=LoadSettings)  # arrival, think time, warm-up, duration, slo
    workers: int = 1  # load-generator processes per point (harness.loadgen.split)
    description: str | None = None
    servers_raw: list | None = None
    matrix_raw: dict | None = None
    suite_raw: Any = None
    source_path: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    search: SearchSpec | None = None  # a capacity search (harness.sweep.search) instead of a sweep
    priorities: tuple[PriorityClass, ...] = ()  # request classes (harness.spec.traffic)
    salt: str | None = None  # per-request: the zero-reuse control

    def points(self) -> list[Point]:
        """Cartesian product of the sweep, in key order; one point with an empty sweep if none."""
        keys = list(self.sweep)
        out: list[Point] = []
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            chosen = dict(zip(keys, values, strict=True))
            sweep = {k: sweep_label(v) for k, v in chosen.items()}
            wl_over = {k: v for k, v in chosen.items() if k not in SWEEPABLE_TOP}
            out.append(
                Point(
                    sweep=sweep,
                    workload=dataclasses.replace(self.workload, **wl_over),
                    concurrency=int(chosen.get("concurrency", self.concurrency)),
                    request_rate=chosen.get("request_rate", self.request_rate),
                )
            )
        return out

    def probe_point(self, value: float) -> Point:
        """The point a capacity search probes at `value` of its knob: an ordinary point, named by it."""
        assert self.search is not None
        label = self.search.label(value)
        knob = self.search.knob
        wl: Workload = self.workload
        if knob == "sessions" and isinstance(wl, MultiTurnWorkload):
            wl = dataclasses.replace(wl, sessions=int(label))
        if knob == "speedup" and isinstance(wl, TraceWorkload):  # the trace's own times / the value
            wl = dataclasses.replace(wl, speedup=float(label))
        concurrency = int(label) if knob == "concurrency" else self.concurrency
        if knob == "agents" and isinstance(wl, TraceWorkload):  # N agents: N requests may be in flight
            wl, concurrency = dataclasses.replace(wl, agents=int(label)), max(concurrency, int(label))
        return Point(
            sweep={knob: label},
            workload=wl,
            concurrency=concurrency,
            request_rate=float(label) if knob == "request_rate" else self.request_rate,
        )

    def resolved_headers(self) -> dict[str, str]:
        """Header values with ${ENV} references filled in; a missing variable is a spec error."""
        out = {}
        for k, v in self.headers.items():

            def sub(m: re.Match, key: str = k) -> str:
                if (val := os.environ.get(m.group(1))) is None:
                    why = f"environment variable {m.group(1)} is not set"
                    raise SpecError(str(self.source_path), f"headers.{key}", why)
                return val

            out[k] = _ENV_REF.sub(sub, v)
        return out

    def server_profiles(self, environ: dict[str, str] | None = None) -> list[ServerProfile]:
        """`servers` expanded over `matrix`, validated (SpecError naming file and key); only a run that
        launches servers asks, so a spec read back from a manifest never needs its ${ENV} set."""
        return parse_servers(self.servers_raw, self.matrix_raw, str(self.source_path), environ)

    def sim_settings(self) -> SimSettings:
        """`suite.sim`: the card profile, time scale and extra arguments of profiles run on the sim."""
        return parse_suite(self.suite_raw, str(self.source_path))

    def redacted_raw(self) -> dict[str, Any]:
        """The spec as written, with every header value replaced, for manifests."""
        return redact_headers(self.raw)


def redact_headers(obj: Any) -> Any:
    if isinstance(obj, dict):
        hide = {k for k, v in obj.items() if k == "headers" and isinstance(v, dict)}
        return {
            k: ({hk: "<redacted>" for hk in v} if k in hide else redact_headers(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_headers(v) for v in obj]
    return obj


def load_spec(path: str | Path) -> ExperimentSpec:
    """Read and validate one experiment spec; raises SpecError with a one-line message."""
    p = Path(path)
    f = str(path)
    if not p.is_file():
        raise SpecError(f, "", "no such file")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise SpecError(f, "", f"not valid YAML ({where}: {getattr(e, 'problem', e)})") from None
    except UnicodeDecodeError:
        raise SpecError(f, "", "not a UTF-8 text file") from None
    if not isinstance(raw, dict):
        raise SpecError(f, "", f"expected a mapping at the top level, got {tname(raw)}")
    return parse_spec(raw, f, base_dir=p.parent)


def parse_spec(
    raw: dict[str, Any], f: str = "<spec>", base_dir: Path | None = None, *, files: bool = True
) -> ExperimentSpec:
    """Validate a spec's mapping; relative paths resolve from base_dir. files=False: the files it names
    need not exist (a spec read back from a manifest: harness.spec.captured_spec)."""
    base_dir = base_dir or Path(".")
    no_unknown(raw, TOP_KEYS, f, "")
    name = req(raw, "name", f, "")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise SpecError(f, "name", f"expected a name of letters, digits, '.', '_' or '-', got {name!r}")
    api = raw.get("api", "openai-chat")
    if api not in APIS:
        raise SpecError(f, "api", f"expected one of {', '.join(APIS)}, got {api!r}")
    model = req(raw, "model", f, "")
    if not isinstance(model, str) or not model:
        raise SpecError(f, "model", f"expected a model name string, got {model!r}")
    tokenizer = raw.get("tokenizer", "word")
    if not isinstance(tokenizer, str) or not tokenizer:
        raise SpecError(f, "tokenizer", f"expected word, server or a local tokenizer path, got {tokenizer!r}")
    if tokenizer == "server" and api != "sglang-generate":
        raise SpecError(
            f, "tokenizer", f"'server' sends token ids, which needs api: sglang-generate (api is {api})"
        )
    if tokenizer not in ("word", "server"):
        tp = Path(expand_path(tokenizer))  # {cache} and ~, as in server profiles
        if not tp.is_absolute():
            tp = base_dir / tp
        if files and not tp.exists():
            raise SpecError(
                f,
                "tokenizer",
                f"expected word, server or an existing local path, {tokenizer!r} does not exist",
            )
        tokenizer = str(tp)
    concurrency = pos_int(raw.get("concurrency", 1), f, "concurrency")
    seeds = raw.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if not isinstance(seeds, list) or not seeds:
        raise SpecError(f, "seeds", f"expected a non-empty list of integers, got {seeds!r}")
    for i, s in enumerate(seeds):
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise SpecError(f, f"seeds[{i}]", f"expected a non-negative integer, got {s!r}")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f, "seeds", f"expected distinct seeds, got {seeds}")
    wl_raw = req(raw, "workload", f, "")
    workload = parse_workload(wl_raw, f, "workload", base_dir, files)
    request_rate = raw.get("request_rate")
    if request_rate is not None:
        request_rate = pos_float(request_rate, f, "request_rate")
    timeouts = _parse_timeouts(raw.get("timeouts"), f)
    headers = raw.get("headers") or {}
    if not isinstance(headers, dict):
        raise SpecError(f, "headers", f"expected a mapping of header name to value, got {tname(headers)}")
    for k, v in headers.items():
        if not isinstance(k, str) or not isinstance(v, str | int | float) or isinstance(v, bool):
            raise SpecError(f, f"headers.{k}", "expected a string value (use ${ENV_VAR} for secrets)")
    headers = {k: str(v) for k, v in headers.items()}
    mff = raw.get("max_failed_fraction", 0.05)
    if not isinstance(mff, int | float) or isinstance(mff, bool) or not 0 <= mff <= 1:
        raise SpecError(f, "max_failed_fraction", f"expected a number between 0 and 1, got {mff!r}")
    sweep = _parse_sweep(raw.get("sweep"), workload, f, base_dir, files)
    search = parse_search(raw.get("search"), f, workload.kind, sweep, getattr(workload, "format", None))
    if (
        isinstance(workload, TraceWorkload)
        and workload.timestamps == "honor"
        and workload.format != "conversations"
    ) and (request_rate is not None or "request_rate" in sweep):
        raise SpecError(
            f,
            "request_rate",
            "the trace sends at its own times (timestamps: honor); use timestamps: ignore",
        )
    rate_knob = search is not None and search.knob == "request_rate"
    has_rate = request_rate is not None or "request_rate" in sweep or rate_knob
    load = parse_load_settings(raw, f, has_rate, workload.kind)
    if search is not None and load.slo is None:  # goodput figures judged by the search's own bounds
        load = dataclasses.replace(load, slo=dict(search.slo))
    workers = pos_int(raw.get("workers", 1), f, "workers")
    searched = [int(search.lo)] if search is not None and search.knob == "concurrency" else []
    for c in [concurrency, *sweep.get("concurrency", []), *searched]:
        if workers > c:
            raise SpecError(
                f, "workers", f"{workers} processes need a concurrency of at least {workers} (got {c})"
            )
    servers = raw.get("servers")
    if servers is not None and not isinstance(servers, list):
        raise SpecError(f, "servers", f"expected a list of server profiles, got {tname(servers)}")
    matrix = raw.get("matrix")
    if matrix is not None and not isinstance(matrix, dict):
        raise SpecError(f, "matrix", f"expected a mapping, got {tname(matrix)}")
    desc = raw.get("description")
    priorities = parse_priorities(raw.get("priorities"), f)
    salt = parse_salt(raw.get("salt"), f, api)
    spec = ExperimentSpec(
        name=name,
        api=api,
        model=model,
        tokenizer=tokenizer,
        concurrency=concurrency,
        seeds=list(seeds),
        workload=workload,
        sweep=sweep,
        request_rate=request_rate,
        timeouts=timeouts,
        headers=headers,
        max_failed_fraction=float(mff),
        load=load,
        workers=workers,
        description=str(desc) if desc is not None else None,
        servers_raw=servers,
        matrix_raw=matrix,
        suite_raw=raw.get("suite"),
        source_path=Path(f),
        raw=copy.deepcopy(raw),
        search=search,
        priorities=priorities,
        salt=salt,
    )
    # fail on unset ${ENV} references now, not mid-run
    spec.resolved_headers()
    return spec


def captured_spec(manifest: dict[str, Any], where: str, *, files: bool = False) -> ExperimentSpec:
    """The spec a capture ran, rebuilt through parse_spec from what its manifest keeps (the file as
    written, headers redacted), so readers get the same types and defaults as the run did. Relative
    paths resolve from the spec's folder as recorded (else the current one); files=False: the files it
    names need not be here. SpecError when the manifest keeps no spec or it does not parse."""
    raw = manifest.get("spec")
    if not isinstance(raw, dict):
        raise SpecError(where, "spec", "missing: the manifest keeps no spec")
    sp = manifest.get("spec_path")
    base = Path(sp).parent if isinstance(sp, str) and sp and Path(sp).parent.is_dir() else Path.cwd()
    return parse_spec(raw, where, base_dir=base, files=files)


def point_of(spec: ExperimentSpec, sweep: dict[str, Any]) -> Point | None:
    """The spec's point with these sweep values (as point.json or a folder name writes them); None if none."""
    points = spec.points()
    exact = next((p for p in points if p.sweep == sweep), None)
    if exact is not None:
        return exact
    as_text = {k: str(v) for k, v in sweep.items()}
    found = next((p for p in points if {k: str(v) for k, v in p.sweep.items()} == as_text), None)
    if found is None and spec.search is not None and list(sweep) == [spec.search.knob]:
        try:  # a capacity search's probe: named by its knob's value
            return spec.probe_point(float(sweep[spec.search.knob]))
        except (TypeError, ValueError):
            return None
    return found


def _parse_timeouts(v: Any, f: str) -> Timeouts:
    if v is None:
        return Timeouts()
    if not isinstance(v, dict):
        raise SpecError(
            f, "timeouts", f"expected a mapping with connect, first_token, total, stall, got {tname(v)}"
        )
    no_unknown(v, {"connect", "first_token", "total", "stall"}, f, "timeouts")
    d = Timeouts()
    return Timeouts(
        connect=pos_float(v.get("connect", d.connect), f, "timeouts.connect"),
        first_token=pos_float(v.get("first_token", d.first_token), f, "timeouts.first_token"),
        total=pos_float(v.get("total", d.total), f, "timeouts.total"),
        stall=pos_float(v.get("stall", d.stall), f, "timeouts.stall"),
    )


def _parse_sweep(v: Any, workload: Workload, f: str, base_dir: Path, files: bool) -> dict[str, list[Any]]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise SpecError(f, "sweep", f"expected a mapping of key -> list of values, got {tname(v)}")
    allowed = {
        "shared-prefix": SHARED_PREFIX_KEYS,
        "multi-turn": MULTI_TURN_KEYS,
        "trace": {
            *("block_tokens", "start", "limit", "speedup", "max_output_tokens", "timestamps", "history"),
            "agents",
        },
        "agent": AGENT_SWEEP_KEYS,
    }[workload.kind] - {"kind"}
    out: dict[str, list[Any]] = {}
    for k, vals in v.items():
        if k not in allowed and k not in SWEEPABLE_TOP:
            choices = ", ".join(sorted(allowed | set(SWEEPABLE_TOP)))
            raise SpecError(
                f, f"sweep.{k}", f"unknown key for a {workload.kind} workload (expected one of: {choices})"
            )
        if not isinstance(vals, list) or not vals:
            raise SpecError(f, f"sweep.{k}", f"expected a non-empty list of values, got {vals!r}")
        checked: list[Any] = []
        for i, x in enumerate(vals):
            key = f"sweep.{k}[{i}]"
            if k == "concurrency":
                checked.append(pos_int(x, f, key))
            elif k == "request_rate":
                checked.append(None if x is None else pos_float(x, f, key))
            elif k == "question_tokens":
                checked.append(parse_question(x, f, key, base_dir, files))
            elif k == "shuffle":
                if not isinstance(x, bool):
                    raise SpecError(f, key, f"expected true or false, got {x!r}")
                checked.append(x)
            elif k in ("history", "timestamps"):
                modes = {"history": HISTORY_MODES, "timestamps": TRACE_TIMESTAMPS}[k]
                if workload.kind == "trace" and k == "history":
                    modes = TRACE_HISTORY
                if x not in modes:
                    raise SpecError(f, key, f"expected one of {', '.join(modes)}, got {x!r}")
                checked.append(x)
            elif k in ("system_prompt_tokens", "start"):
                checked.append(nonneg_int(x, f, key))
            elif k == "speedup":
                checked.append(pos_float(x, f, key))
            else:
                checked.append(pos_int(x, f, key))
        if len({repr(x) for x in checked}) != len(checked):
            raise SpecError(f, f"sweep.{k}", f"expected distinct values, got {vals!r}")
        out[k] = checked
    return out
