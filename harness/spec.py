"""Experiment specs: YAML -> typed, validated objects, rejected with one line before anything is sent.

Every error is `SpecError(file, key.path, what was expected)`. Server profiles (`servers`, `matrix`,
`suite`) belong to harness.servers.profiles; they are kept raw here and validated there.
"""

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
from harness.loadgen.settings import LOAD_KEYS, LoadSettings, parse_load_settings
from harness.paths import expand_path

APIS = ("openai-chat", "openai-completions", "sglang-generate")
KINDS = ("shared-prefix", "multi-turn", "trace")
HISTORY_MODES = ("verbatim", "drop-reasoning")
TRACE_FORMATS = ("mooncake", "conversations", "requests")
TRACE_TIMESTAMPS = ("honor", "ignore")
TRACE_HISTORY = ("live", "recorded")
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
    *LOAD_KEYS,
}
SHARED_PREFIX_KEYS = {
    "kind",
    "groups",
    "prompts_per_group",
    "system_prompt_tokens",
    "question_tokens",
    "output_tokens",
    "shuffle",
}
MULTI_TURN_KEYS = {
    "kind",
    "sessions",
    "turns",
    "system_prompt_tokens",
    "question_tokens",
    "answer_tokens",
    "history",
}
TRACE_KEYS = {
    "kind",
    "path",
    "format",
    "block_tokens",
    "start",
    "limit",
    "timestamps",
    "timestamp_unit",
    "speedup",
    "max_output_tokens",
    "history",
}
# sweep may also vary these top-level run settings, not only workload keys
SWEEPABLE_TOP = ("concurrency", "request_rate")


@dataclass(frozen=True)
class LogNormal:
    """Question lengths drawn per turn: `mean` tokens on average, `sigma` in log space."""

    mean: float
    sigma: float
    min: int = 1
    max: int | None = None


@dataclass(frozen=True)
class ShareGPT:
    """Real human turns drawn from a ShareGPT-format JSON file the user has locally."""

    path: Path


QuestionLength = int | LogNormal | ShareGPT


@dataclass(frozen=True)
class SharedPrefixWorkload:
    kind: str
    groups: int
    prompts_per_group: int
    system_prompt_tokens: int
    question_tokens: QuestionLength
    output_tokens: int
    shuffle: bool = True


@dataclass(frozen=True)
class MultiTurnWorkload:
    kind: str
    sessions: int
    turns: int
    system_prompt_tokens: int
    question_tokens: QuestionLength
    answer_tokens: int
    history: str = "verbatim"

    @property
    def output_tokens(self) -> int:
        return self.answer_tokens


@dataclass(frozen=True)
class TraceWorkload:
    """Someone's recorded traffic replayed as it was: a Mooncake trace, conversations, or a request log."""

    kind: str
    path: Path
    format: str
    block_tokens: int = 512  # mooncake: tokens per hash id in the prompt sent (the trace's own: 512)
    start: int = 0  # first request (0-based) of the file
    limit: int | None = None  # how many (None: to the end)
    timestamps: str = "honor"  # honor: send at trace time / speedup; ignore: as fast as concurrency allows
    timestamp_unit: str = "s"  # requests format: s | ms (mooncake traces are in ms)
    speedup: float = 1.0
    max_output_tokens: int | None = None  # cap on the trace's output lengths
    history: str = "live"  # conversations: live (the server's answers) | recorded (the file's)


Workload = SharedPrefixWorkload | MultiTurnWorkload | TraceWorkload


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0
    first_token: float = 300.0
    total: float = 600.0


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

    def points(self) -> list[Point]:
        """Cartesian product of the sweep, in key order; one point with an empty sweep if none."""
        keys = list(self.sweep)
        out: list[Point] = []
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            chosen = dict(zip(keys, values, strict=True))
            sweep = {k: _label(v) for k, v in chosen.items()}
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

    def redacted_raw(self) -> dict[str, Any]:
        """The spec as written, with every header value replaced, for manifests."""
        return redact_headers(self.raw)


def _label(v: Any) -> Any:
    """A sweep value as it appears in a point folder name (no commas, no spaces)."""
    if isinstance(v, LogNormal):
        return f"lognormal-{v.mean:g}-{v.sigma:g}"
    if isinstance(v, ShareGPT):
        return f"sharegpt-{v.path.stem}"
    return v


def redact_headers(obj: Any) -> Any:
    if isinstance(obj, dict):
        hide = {k for k, v in obj.items() if k == "headers" and isinstance(v, dict)}
        return {
            k: ({hk: "<redacted>" for hk in v} if k in hide else redact_headers(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_headers(v) for v in obj]
    return obj


# --------------------------------------------------------------------------- loading


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
        raise SpecError(f, "", f"expected a mapping at the top level, got {_tname(raw)}")
    return parse_spec(raw, f, base_dir=p.parent)


def parse_spec(raw: dict[str, Any], f: str = "<spec>", base_dir: Path | None = None) -> ExperimentSpec:
    base_dir = base_dir or Path(".")
    _no_unknown(raw, TOP_KEYS, f, "")
    name = _req(raw, "name", f, "")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise SpecError(f, "name", f"expected a name of letters, digits, '.', '_' or '-', got {name!r}")
    api = raw.get("api", "openai-chat")
    if api not in APIS:
        raise SpecError(f, "api", f"expected one of {', '.join(APIS)}, got {api!r}")
    model = _req(raw, "model", f, "")
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
        if not tp.exists():
            raise SpecError(
                f,
                "tokenizer",
                f"expected word, server or an existing local path, {tokenizer!r} does not exist",
            )
        tokenizer = str(tp)
    concurrency = _pos_int(raw.get("concurrency", 1), f, "concurrency")
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
    wl_raw = _req(raw, "workload", f, "")
    workload = _parse_workload(wl_raw, f, "workload", base_dir)
    request_rate = raw.get("request_rate")
    if request_rate is not None:
        request_rate = _pos_float(request_rate, f, "request_rate")
    timeouts = _parse_timeouts(raw.get("timeouts"), f)
    headers = raw.get("headers") or {}
    if not isinstance(headers, dict):
        raise SpecError(f, "headers", f"expected a mapping of header name to value, got {_tname(headers)}")
    for k, v in headers.items():
        if not isinstance(k, str) or not isinstance(v, str | int | float) or isinstance(v, bool):
            raise SpecError(f, f"headers.{k}", "expected a string value (use ${ENV_VAR} for secrets)")
    headers = {k: str(v) for k, v in headers.items()}
    mff = raw.get("max_failed_fraction", 0.05)
    if not isinstance(mff, int | float) or isinstance(mff, bool) or not 0 <= mff <= 1:
        raise SpecError(f, "max_failed_fraction", f"expected a number between 0 and 1, got {mff!r}")
    sweep = _parse_sweep(raw.get("sweep"), workload, f, base_dir)
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
    load = parse_load_settings(raw, f, request_rate is not None or "request_rate" in sweep, workload.kind)
    workers = _pos_int(raw.get("workers", 1), f, "workers")
    for c in [concurrency, *sweep.get("concurrency", [])]:
        if workers > c:
            raise SpecError(
                f, "workers", f"{workers} processes need a concurrency of at least {workers} (got {c})"
            )
    servers = raw.get("servers")
    if servers is not None and not isinstance(servers, list):
        raise SpecError(f, "servers", f"expected a list of server profiles, got {_tname(servers)}")
    matrix = raw.get("matrix")
    if matrix is not None and not isinstance(matrix, dict):
        raise SpecError(f, "matrix", f"expected a mapping, got {_tname(matrix)}")
    desc = raw.get("description")
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
    )
    # fail on unset ${ENV} references now, not mid-run
    spec.resolved_headers()
    return spec


def _parse_workload(wl: Any, f: str, key: str, base_dir: Path) -> Workload:
    if not isinstance(wl, dict):
        raise SpecError(f, key, f"expected a mapping, got {_tname(wl)}")
    kind = wl.get("kind")
    if kind not in KINDS:
        raise SpecError(f, f"{key}.kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "trace":
        return _parse_trace(wl, f, key, base_dir)
    if kind == "shared-prefix":
        _no_unknown(wl, SHARED_PREFIX_KEYS, f, key)
        shuffle = wl.get("shuffle", True)
        if not isinstance(shuffle, bool):
            raise SpecError(f, f"{key}.shuffle", f"expected true or false, got {shuffle!r}")
        return SharedPrefixWorkload(
            kind=kind,
            groups=_pos_int(_req(wl, "groups", f, key), f, f"{key}.groups"),
            prompts_per_group=_pos_int(_req(wl, "prompts_per_group", f, key), f, f"{key}.prompts_per_group"),
            system_prompt_tokens=_nonneg_int(
                _req(wl, "system_prompt_tokens", f, key), f, f"{key}.system_prompt_tokens"
            ),
            question_tokens=_question(
                _req(wl, "question_tokens", f, key), f, f"{key}.question_tokens", base_dir
            ),
            output_tokens=_pos_int(_req(wl, "output_tokens", f, key), f, f"{key}.output_tokens"),
            shuffle=shuffle,
        )
    _no_unknown(wl, MULTI_TURN_KEYS, f, key)
    history = wl.get("history", "verbatim")
    if history not in HISTORY_MODES:
        raise SpecError(f, f"{key}.history", f"expected one of {', '.join(HISTORY_MODES)}, got {history!r}")
    return MultiTurnWorkload(
        kind=kind,
        sessions=_pos_int(_req(wl, "sessions", f, key), f, f"{key}.sessions"),
        turns=_pos_int(_req(wl, "turns", f, key), f, f"{key}.turns"),
        system_prompt_tokens=_nonneg_int(
            _req(wl, "system_prompt_tokens", f, key), f, f"{key}.system_prompt_tokens"
        ),
        question_tokens=_question(_req(wl, "question_tokens", f, key), f, f"{key}.question_tokens", base_dir),
        answer_tokens=_pos_int(_req(wl, "answer_tokens", f, key), f, f"{key}.answer_tokens"),
        history=history,
    )


def _parse_trace(wl: dict, f: str, key: str, base_dir: Path) -> TraceWorkload:
    """The trace's keys; the file itself is read (and each line checked) when the schedule is built."""
    _no_unknown(wl, TRACE_KEYS, f, key)
    raw_path = _req(wl, "path", f, key)
    if not isinstance(raw_path, str) or not raw_path:
        raise SpecError(f, f"{key}.path", f"expected a path to a trace file, got {raw_path!r}")
    p = Path(expand_path(raw_path))
    if not p.is_absolute():
        p = base_dir / p
    if not p.is_file():
        raise SpecError(f, f"{key}.path", f"file not found: {raw_path}")
    fmt = wl.get("format", "mooncake")
    if fmt not in TRACE_FORMATS:
        raise SpecError(f, f"{key}.format", f"expected one of {', '.join(TRACE_FORMATS)}, got {fmt!r}")
    choices = {"timestamps": TRACE_TIMESTAMPS, "timestamp_unit": ("s", "ms"), "history": TRACE_HISTORY}
    picked = {}
    for k, allowed in choices.items():
        v = wl.get(k, TraceWorkload.__dataclass_fields__[k].default)
        if v not in allowed:
            raise SpecError(f, f"{key}.{k}", f"expected one of {', '.join(allowed)}, got {v!r}")
        picked[k] = v
    limit = wl.get("limit")
    cap = wl.get("max_output_tokens")
    return TraceWorkload(
        kind="trace",
        path=p,
        format=fmt,
        block_tokens=_pos_int(wl.get("block_tokens", 512), f, f"{key}.block_tokens"),
        start=_nonneg_int(wl.get("start", 0), f, f"{key}.start"),
        limit=None if limit is None else _pos_int(limit, f, f"{key}.limit"),
        speedup=_pos_float(wl.get("speedup", 1.0), f, f"{key}.speedup"),
        max_output_tokens=None if cap is None else _pos_int(cap, f, f"{key}.max_output_tokens"),
        **picked,
    )


def _question(v: Any, f: str, key: str, base_dir: Path) -> QuestionLength:
    if isinstance(v, dict):
        if "sharegpt" in v:
            _no_unknown(v, {"sharegpt"}, f, key)
            sp = v["sharegpt"]
            if not isinstance(sp, str) or not sp:
                raise SpecError(f, f"{key}.sharegpt", f"expected a path to a ShareGPT JSON file, got {sp!r}")
            p = Path(sp).expanduser()
            if not p.is_absolute():
                p = base_dir / p
            if not p.is_file():
                raise SpecError(f, f"{key}.sharegpt", f"file not found: {sp}")
            return ShareGPT(path=p)
        if v.get("distribution") == "lognormal":
            _no_unknown(v, {"distribution", "mean", "sigma", "min", "max"}, f, key)
            mean = _pos_float(_req(v, "mean", f, key), f, f"{key}.mean")
            sigma = v.get("sigma", 0.5)
            if not isinstance(sigma, int | float) or isinstance(sigma, bool) or sigma < 0:
                raise SpecError(f, f"{key}.sigma", f"expected a non-negative number, got {sigma!r}")
            lo = _pos_int(v.get("min", 1), f, f"{key}.min")
            hi = v.get("max")
            if hi is not None:
                hi = _pos_int(hi, f, f"{key}.max")
                if hi < lo:
                    raise SpecError(f, f"{key}.max", f"expected max >= min ({lo}), got {hi}")
            return LogNormal(mean=float(mean), sigma=float(sigma), min=lo, max=hi)
        raise SpecError(
            f,
            key,
            "expected a positive integer, {distribution: lognormal, mean: N, sigma: S} or {sharegpt: path}",
        )
    return _pos_int(v, f, key)


def _parse_timeouts(v: Any, f: str) -> Timeouts:
    if v is None:
        return Timeouts()
    if not isinstance(v, dict):
        raise SpecError(
            f, "timeouts", f"expected a mapping with connect, first_token, total, got {_tname(v)}"
        )
    _no_unknown(v, {"connect", "first_token", "total"}, f, "timeouts")
    d = Timeouts()
    return Timeouts(
        connect=_pos_float(v.get("connect", d.connect), f, "timeouts.connect"),
        first_token=_pos_float(v.get("first_token", d.first_token), f, "timeouts.first_token"),
        total=_pos_float(v.get("total", d.total), f, "timeouts.total"),
    )


def _parse_sweep(v: Any, workload: Workload, f: str, base_dir: Path) -> dict[str, list[Any]]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise SpecError(f, "sweep", f"expected a mapping of key -> list of values, got {_tname(v)}")
    allowed = {
        "shared-prefix": SHARED_PREFIX_KEYS,
        "multi-turn": MULTI_TURN_KEYS,
        "trace": {"block_tokens", "start", "limit", "speedup", "max_output_tokens", "timestamps", "history"},
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
        checked = []
        for i, x in enumerate(vals):
            key = f"sweep.{k}[{i}]"
            if k == "concurrency":
                checked.append(_pos_int(x, f, key))
            elif k == "request_rate":
                checked.append(None if x is None else _pos_float(x, f, key))
            elif k == "question_tokens":
                checked.append(_question(x, f, key, base_dir))
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
                checked.append(_nonneg_int(x, f, key))
            elif k == "speedup":
                checked.append(_pos_float(x, f, key))
            else:
                checked.append(_pos_int(x, f, key))
        if len({repr(x) for x in checked}) != len(checked):
            raise SpecError(f, f"sweep.{k}", f"expected distinct values, got {vals!r}")
        out[k] = checked
    return out


# --------------------------------------------------------------------------- helpers


def _tname(v: Any) -> str:
    return "nothing" if v is None else type(v).__name__


def _req(d: dict, k: str, f: str, parent: str) -> Any:
    if k not in d:
        raise SpecError(f, f"{parent}.{k}" if parent else k, "missing (required)")
    return d[k]


def _no_unknown(d: dict, allowed: set[str], f: str, parent: str) -> None:
    for k in d:
        if k not in allowed:
            raise SpecError(
                f,
                f"{parent}.{k}" if parent else str(k),
                f"unknown key (expected one of: {', '.join(sorted(allowed))})",
            )


def _pos_int(v: Any, f: str, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise SpecError(f, key, f"expected a positive integer, got {v!r}")
    return v


def _nonneg_int(v: Any, f: str, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise SpecError(f, key, f"expected a non-negative integer, got {v!r}")
    return v


def _pos_float(v: Any, f: str, key: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
        raise SpecError(f, key, f"expected a positive number, got {v!r}")
    return float(v)
