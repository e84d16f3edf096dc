"""The spec's `workload:` mapping: shared-prefix groups, multi-turn sessions or a recorded trace, checked
and typed (what is sent is built from it in harness.workloads)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import SpecError
from harness.paths import expand_path
from harness.spec.agent import AgentWorkload, parse_agent
from harness.spec.checks import no_unknown, nonneg_int, pos_float, pos_int, req, tname

KINDS = ("shared-prefix", "multi-turn", "trace", "agent")
HISTORY_MODES = ("verbatim", "drop-reasoning")
TRACE_FORMATS = ("mooncake", "conversations", "requests", "bailian", "agentic")
TRACE_TIMINGS = ("think", "recorded", "api-scaled")  # agentic: a request's delay after the previous answer
TRACE_TIMESTAMPS = ("honor", "ignore")
TRACE_HISTORY = ("live", "recorded")


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
    "timing",
    "api_time_scale",
    "shared_prefix",
    "agents",
}


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
    format: str = "mooncake"  # mooncake | conversations | requests | bailian (sessions: workloads/bailian.py)
    block_tokens: int = 512  # mooncake: tokens per hash id in the prompt sent (the trace's own: 512)
    start: int = 0  # first request (0-based) of the file
    limit: int | None = None  # how many (None: to the end)
    timestamps: str = "honor"  # honor: send at trace time / speedup; ignore: as fast as concurrency allows
    timestamp_unit: str = "s"  # requests format: s | ms (mooncake traces are in ms)
    speedup: float = 1.0
    max_output_tokens: int | None = None  # cap on the trace's output lengths
    history: str = "live"  # conversations: live (the server's answers) | recorded (the file's)
    # agentic (harness.workloads.agentic_trace; path: a folder or one file, start/limit count conversations):
    timing: str = "think"  # think | recorded | api-scaled: each request's delay after the previous answer
    api_time_scale: float = 1.0  # api-scaled: the recorded api_time times this, plus the think time
    shared_prefix: bool = False  # one tools + system prompt for every conversation (else local ids)
    agents: int | None = None  # agentic: this many at once, drawn seeded, recycled (agentic_agents.py)


Workload = SharedPrefixWorkload | MultiTurnWorkload | TraceWorkload | AgentWorkload


def sweep_label(v: Any) -> Any:
    """A sweep value as it appears in a point folder name (no commas, no spaces)."""
    if isinstance(v, LogNormal):
        return f"lognormal-{v.mean:g}-{v.sigma:g}"
    if isinstance(v, ShareGPT):
        return f"sharegpt-{v.path.stem}"
    return v


def parse_workload(wl: Any, f: str, key: str, base_dir: Path, files: bool = True) -> Workload:
    """The `workload:` mapping; files: the files it names must exist (False: a spec read back from a
    manifest, whose trace or ShareGPT file may be elsewhere: checked when one is opened)."""
    if not isinstance(wl, dict):
        raise SpecError(f, key, f"expected a mapping, got {tname(wl)}")
    kind = wl.get("kind")
    if kind not in KINDS:
        raise SpecError(f, f"{key}.kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "trace":
        return _parse_trace(wl, f, key, base_dir, files)
    if kind == "agent":
        return parse_agent(wl, f, key, lambda v, k: parse_question(v, f, k, base_dir, files))
    if kind == "shared-prefix":
        no_unknown(wl, SHARED_PREFIX_KEYS, f, key)
        shuffle = wl.get("shuffle", True)
        if not isinstance(shuffle, bool):
            raise SpecError(f, f"{key}.shuffle", f"expected true or false, got {shuffle!r}")
        return SharedPrefixWorkload(
            kind=kind,
            groups=_pos(wl, "groups", f, key),
            prompts_per_group=_pos(wl, "prompts_per_group", f, key),
            **_prompt_lengths(wl, f, key, base_dir, files),
            output_tokens=_pos(wl, "output_tokens", f, key),
            shuffle=shuffle,
        )
    no_unknown(wl, MULTI_TURN_KEYS, f, key)
    history = wl.get("history", "verbatim")
    if history not in HISTORY_MODES:
        raise SpecError(f, f"{key}.history", f"expected one of {', '.join(HISTORY_MODES)}, got {history!r}")
    return MultiTurnWorkload(
        kind=kind,
        sessions=_pos(wl, "sessions", f, key),
        turns=_pos(wl, "turns", f, key),
        **_prompt_lengths(wl, f, key, base_dir, files),
        answer_tokens=_pos(wl, "answer_tokens", f, key),
        history=history,
    )


def _pos(wl: dict, name: str, f: str, key: str) -> int:
    """The required positive integer `key.name`."""
    return pos_int(req(wl, name, f, key), f, f"{key}.{name}")


def _prompt_lengths(wl: dict, f: str, key: str, base_dir: Path, files: bool) -> dict[str, Any]:
    """system_prompt_tokens and question_tokens, checked alike for the shared-prefix and multi-turn kinds."""
    return {
        "system_prompt_tokens": nonneg_int(
            req(wl, "system_prompt_tokens", f, key), f, f"{key}.system_prompt_tokens"
        ),
        "question_tokens": parse_question(
            req(wl, "question_tokens", f, key), f, f"{key}.question_tokens", base_dir, files
        ),
    }


def _default(name: str) -> Any:
    """A TraceWorkload field's default: the one place it is written down."""
    return TraceWorkload.__dataclass_fields__[name].default


def _parse_trace(wl: dict, f: str, key: str, base_dir: Path, files: bool) -> TraceWorkload:
    """The trace's keys; the file itself is read (and each line checked) when the schedule is built."""
    no_unknown(wl, TRACE_KEYS, f, key)
    raw_path = req(wl, "path", f, key)
    if not isinstance(raw_path, str) or not raw_path:
        raise SpecError(f, f"{key}.path", f"expected a path to a trace file, got {raw_path!r}")
    p = Path(expand_path(raw_path))
    if not p.is_absolute():
        p = base_dir / p
    fmt = wl.get("format", _default("format"))
    if fmt not in TRACE_FORMATS:
        raise SpecError(f, f"{key}.format", f"expected one of {', '.join(TRACE_FORMATS)}, got {fmt!r}")
    if files and not (p.is_file() or (fmt == "agentic" and p.is_dir())):
        raise SpecError(f, f"{key}.path", f"file not found: {raw_path}")
    choices = {
        "timestamps": TRACE_TIMESTAMPS,
        "timestamp_unit": ("s", "ms"),
        "history": TRACE_HISTORY,
        "timing": TRACE_TIMINGS,
    }
    picked = {}
    for k, allowed in choices.items():
        v = wl.get(k, _default(k))
        if v not in allowed:
            raise SpecError(f, f"{key}.{k}", f"expected one of {', '.join(allowed)}, got {v!r}")
        picked[k] = v
    limit = wl.get("limit")
    cap = wl.get("max_output_tokens")
    shared = wl.get("shared_prefix", _default("shared_prefix"))
    if not isinstance(shared, bool):
        raise SpecError(f, f"{key}.shared_prefix", f"expected true or false, got {shared!r}")
    agents = wl.get("agents")
    if agents is not None and fmt != "agentic":
        raise SpecError(f, f"{key}.agents", f"agents need format: agentic (the format is {fmt})")
    own_block = {"bailian": 16, "agentic": 64}.get(fmt, _default("block_tokens"))
    return TraceWorkload(
        kind="trace",
        path=p,
        format=fmt,
        # bailian, agentic: the trace's own 16- and 64-token blocks unless block_tokens says otherwise
        block_tokens=pos_int(
            wl.get("block_tokens", own_block),
            f,
            f"{key}.block_tokens",
        ),
        start=nonneg_int(wl.get("start", _default("start")), f, f"{key}.start"),
        limit=None if limit is None else pos_int(limit, f, f"{key}.limit"),
        speedup=pos_float(wl.get("speedup", _default("speedup")), f, f"{key}.speedup"),
        max_output_tokens=None if cap is None else pos_int(cap, f, f"{key}.max_output_tokens"),
        api_time_scale=pos_float(
            wl.get("api_time_scale", _default("api_time_scale")), f, f"{key}.api_time_scale"
        ),
        shared_prefix=shared,
        agents=None if agents is None else pos_int(agents, f, f"{key}.agents"),
        **picked,
    )


def parse_question(v: Any, f: str, key: str, base_dir: Path, files: bool = True) -> QuestionLength:
    if isinstance(v, dict):
        if "sharegpt" in v:
            no_unknown(v, {"sharegpt"}, f, key)
            sp = v["sharegpt"]
            if not isinstance(sp, str) or not sp:
                raise SpecError(f, f"{key}.sharegpt", f"expected a path to a ShareGPT JSON file, got {sp!r}")
            p = Path(sp).expanduser()
            if not p.is_absolute():
                p = base_dir / p
            if files and not p.is_file():
                raise SpecError(f, f"{key}.sharegpt", f"file not found: {sp}")
            return ShareGPT(path=p)
        if v.get("distribution") == "lognormal":
            no_unknown(v, {"distribution", "mean", "sigma", "min", "max"}, f, key)
            mean = pos_float(req(v, "mean", f, key), f, f"{key}.mean")
            sigma = v.get("sigma", 0.5)
            if not isinstance(sigma, int | float) or isinstance(sigma, bool) or sigma < 0:
                raise SpecError(f, f"{key}.sigma", f"expected a non-negative number, got {sigma!r}")
            lo = pos_int(v.get("min", 1), f, f"{key}.min")
            hi = v.get("max")
            if hi is not None:
                hi = pos_int(hi, f, f"{key}.max")
                if hi < lo:
                    raise SpecError(f, f"{key}.max", f"expected max >= min ({lo}), got {hi}")
            return LogNormal(mean=float(mean), sigma=float(sigma), min=lo, max=hi)
        raise SpecError(
            f,
            key,
            "expected a positive integer, {distribution: lognormal, mean: N, sigma: S} or {sharegpt: path}",
        )
    return pos_int(v, f, key)
