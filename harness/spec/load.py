"""How a spec's requests are sent and judged: arrival process, think time, warm-up, run length, SLOs.

Parsed here from the spec's top-level keys (harness.spec.experiment calls parse_load_settings), each
bad value rejected with one SpecError naming file and key. It lives in spec/ because the spec owns
parsing; the load generator and the arrival processes read the parsed LoadSettings from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import SpecError

ARRIVALS = ("poisson", "constant", "gamma")
THINK_DISTRIBUTIONS = ("constant", "exponential", "lognormal")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")
LOAD_KEYS = ("arrival", "burstiness", "think_time_s", "warmup_requests", "duration_s", "slo", "ignore_eos")


@dataclass(frozen=True)
class ThinkTime:
    """Seconds a multi-turn user waits after an answer before the next turn: a constant or seeded draws."""

    mean_s: float
    distribution: str = "constant"
    sigma: float = 0.5  # lognormal only, in log space


@dataclass(frozen=True)
class LoadSettings:
    arrival: str = "poisson"
    burstiness: float = 1.0  # gamma only: shape; mean gap stays 1 / request_rate
    think_time: ThinkTime | None = None
    warmup_requests: int = 0
    duration_s: float | None = None
    slo: dict[str, float] | None = None  # subset of SLO_KEYS -> bound in ms
    # OpenAI bodies carry the engines' `ignore_eos` extension (fixed-length answers); false leaves it out, for a
    # strict OpenAI server that refuses unknown fields (transformers serve answers 422)
    ignore_eos: bool = True


def parse_load_settings(raw: dict[str, Any], f: str, has_rate: bool, kind: str) -> LoadSettings:
    """The load keys of a spec (raw: its top level); has_rate: a request_rate is set or swept."""
    for key in ("arrival", "burstiness"):
        if key in raw and not has_rate:
            raise SpecError(f, key, "needs a request_rate (closed-loop runs have no arrival process)")
    if "think_time_s" in raw and kind not in ("multi-turn", "trace", "agent"):  # a trace: its conversations
        raise SpecError(f, "think_time_s", f"applies to multi-turn workloads (this one is {kind})")
    arrival = raw.get("arrival", "poisson")
    if arrival not in ARRIVALS:
        raise SpecError(f, "arrival", f"expected one of {', '.join(ARRIVALS)}, got {arrival!r}")
    burstiness = _positive(raw.get("burstiness", 1.0), f, "burstiness")
    if "burstiness" in raw and arrival != "gamma":
        raise SpecError(f, "burstiness", f"only applies to arrival: gamma (arrival is {arrival})")
    warmup = raw.get("warmup_requests", 0)
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise SpecError(f, "warmup_requests", f"expected a non-negative integer, got {warmup!r}")
    duration = raw.get("duration_s")
    ignore_eos = raw.get("ignore_eos", True)
    if not isinstance(ignore_eos, bool):
        raise SpecError(f, "ignore_eos", f"expected true or false, got {ignore_eos!r}")
    return LoadSettings(
        arrival=arrival,
        burstiness=burstiness,
        think_time=_think(raw.get("think_time_s"), f),
        warmup_requests=warmup,
        duration_s=None if duration is None else _positive(duration, f, "duration_s"),
        slo=_slo(raw.get("slo"), f),
        ignore_eos=ignore_eos,
    )


def _think(v: Any, f: str) -> ThinkTime | None:
    key = "think_time_s"
    if v is None:
        return None
    if isinstance(v, dict):
        for k in v:
            if k not in ("distribution", "mean", "sigma"):
                raise SpecError(f, f"{key}.{k}", "unknown key (expected one of: distribution, mean, sigma)")
        dist = v.get("distribution", "constant")
        if dist not in THINK_DISTRIBUTIONS:
            raise SpecError(
                f, f"{key}.distribution", f"expected one of {', '.join(THINK_DISTRIBUTIONS)}, got {dist!r}"
            )
        if "mean" not in v:
            raise SpecError(f, f"{key}.mean", "missing (required)")
        mean = _non_negative(v["mean"], f, f"{key}.mean")
        sigma = _non_negative(v.get("sigma", 0.5), f, f"{key}.sigma")
        return ThinkTime(mean_s=mean, distribution=dist, sigma=sigma)
    return ThinkTime(mean_s=_non_negative(v, f, key))


def _slo(v: Any, f: str) -> dict[str, float] | None:
    if v is None:
        return None
    if not isinstance(v, dict) or not v:
        raise SpecError(f, "slo", f"expected a mapping of {', '.join(SLO_KEYS)} to milliseconds, got {v!r}")
    out = {}
    for k, bound in v.items():
        if k not in SLO_KEYS:
            raise SpecError(f, f"slo.{k}", f"unknown key (expected one of: {', '.join(SLO_KEYS)})")
        out[k] = _positive(bound, f, f"slo.{k}")
    return out


def _positive(v: Any, f: str, key: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or not v > 0 or v == float("inf"):
        raise SpecError(f, key, f"expected a positive number, got {v!r}")
    return float(v)


def _non_negative(v: Any, f: str, key: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool) or not v >= 0 or v == float("inf"):
        raise SpecError(f, key, f"expected a non-negative number, got {v!r}")
    return float(v)
