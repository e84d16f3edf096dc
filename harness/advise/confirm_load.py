"""`--confirm` at the input's load: the slice is sent at the load advise replayed (harness.advise.load.Load),
and each candidate's measured TTFT and SLO attainment stand beside the predicted ones.

The prediction is the trace *as sent* (each hash id as the live block's tokens, answers shrunk alike:
harness.advise.live_spec) replayed through the sim's scheduler (harness.whatif.serve.engine) at the same
load on the same (scaled) configuration: the advice's own 512-token trace would model 32x the prefill the
sim gets. On the sim the measured TTFT is its virtual clock's (the answers' `sim_time` stamps,
harness.summarize.modelled), never wall time; on a real server it is the records' own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.advise.load import Load, at_load
from harness.advise.slo import DEFAULT_SLO, Slo
from harness.sim.timing import CardProfile
from harness.whatif.grid import Config
from harness.whatif.trace import Trace

MAX_IN_FLIGHT = 4096  # an open loop's cap on requests in flight, live and predicted alike


@dataclass(frozen=True)
class Timing:
    """One side of a candidate's at-load comparison: TTFT and the SLO attainment over the requests sent."""

    ttft_ms: dict[str, float]  # mean, p50, p90, p99 of the answered requests
    attainment: float  # share of the requests sent within the SLO's per-request bounds (no answer: missed)
    requests: int
    hit_rate: float | None = None  # the predicted side's hit rate at this load

    def to_dict(self) -> dict[str, Any]:
        return {
            "ttft_ms": {k: round(v, 3) for k, v in self.ttft_ms.items()},
            "slo_attainment": self.attainment,
        }


def timing(ttft_s: Sequence[float], slo: Slo | None, hit_rate: float | None = None) -> Timing:
    """The figures of one run's per-request TTFTs (seconds; nan: no answer)."""
    import numpy as np

    ok = np.asarray([t for t in ttft_s if t == t], dtype=float) * 1000.0
    figs = {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    if len(ok):
        q = np.percentile(ok, [50, 90, 99])
        figs = {"mean": float(ok.mean()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}
    att = (slo or DEFAULT_SLO).attainment(list(ttft_s))
    return Timing(figs, round(att, 6), len(ttft_s), hit_rate)


def spec_load(load: Load, requests: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The live spec's top-level and workload keys that send `requests` requests at `load`: a trace's own
    times over --speedup (timestamps: honor), Poisson arrivals at --rate, or --concurrency in flight."""
    cap = max(1, min(requests, MAX_IN_FLIGHT))
    if load.kind == "trace":
        return {"concurrency": cap}, {"timestamps": "honor", "speedup": load.speedup}
    if load.kind == "rate":
        return {"concurrency": cap, "request_rate": load.rate}, {"timestamps": "ignore"}
    return {"concurrency": int(load.concurrency or 1)}, {"timestamps": "ignore"}


def live_trace(sent: Trace, live_unit: int) -> Trace:
    """The advice-unit trace as a shrunk-block server gets it, token by token: each hash id `live_unit`
    distinct tokens, a prompt cut at ceil(tokens x live_unit / unit) as the load generator cuts it, and
    each answer as its own new ids (shrunk alike, at least 1 token), cached after its prompt as the sim
    and SGLang cache it: without the answers the replay had the 3,840-token pool of the conversation
    trace's slice roomier than the sim's (TTFT p90 310 against 378 ms; with them, equal). A server sent
    the trace's own block keeps the block trace."""
    if sent.kind != "blocks" or live_unit >= sent.unit:
        return sent
    f = live_unit / sent.unit
    top = max((max(r.key, default=0) for r in sent.requests), default=0)
    answer = (top + 1) * live_unit  # the answers' ids: past every prompt id
    reqs = []
    for r in sent.requests:
        n, out = math.ceil(r.tokens * f), max(1, math.ceil(r.output_tokens * f))
        key = tuple(h * live_unit + j for h in r.key for j in range(live_unit))[:n]
        reqs.append(
            dataclasses.replace(
                r, key=key, tokens=n, output_tokens=out, output_key=tuple(range(answer, answer + out))
            )
        )
        answer += out
    return dataclasses.replace(sent, requests=reqs, unit=1, kind="tokens")


def live_config(cfg: Config, trace: Trace, live_unit: int) -> Config:
    """The configuration in the live trace's unit: a pool of P blocks is P x live_unit tokens, and tlru's
    lengths alike (harness.advise.grid.policy_config_tokens), as the server is launched."""
    if trace.kind != "tokens" or live_unit == 1:
        return cfg
    from harness.advise.grid import policy_config_tokens

    own = tuple(sorted(policy_config_tokens(cfg, live_unit).items()))
    return dataclasses.replace(cfg, pool=cfg.pool * live_unit, policy_config=own)


def loaded(trace: Trace, load: Load) -> Trace:
    """The trace at `load` with the live spec's cap on requests in flight."""
    out = at_load(trace, load)
    if load.kind != "concurrency":
        out.concurrency = max(1, min(len(trace.requests), MAX_IN_FLIGHT))
    return out


def predicted(
    trace: Trace, cfgs: list[Config], load: Load, profile: CardProfile, slo: Slo | None, live_unit: int = 1
) -> list[Timing]:
    """Each configuration (in the advice's units) replayed through the scheduler at `load` on the trace as
    sent (live_trace: `live_unit` tokens a block)."""
    from harness.whatif.replay import ideal_hits
    from harness.whatif.serve import engine

    t = loaded(trace, load)
    cfgs = [live_config(c, trace, live_unit) for c in cfgs]
    ideal = {p: ideal_hits(t, p) for p in sorted({c.page_size for c in cfgs})}
    out = []
    for c in cfgs:
        got = engine(t, c, ideal[c.page_size], profile)
        out.append(timing(got.ttft_s, slo, got.result.hit_rate))
    return out


def measured(pdir: Path, slo: Slo | None) -> Timing | None:
    """The point's requests on the sim's virtual clock (or the server's own where no stamps), the warm-up
    left out; a request that failed counts as missing the SLO. None: no request recorded."""
    from harness.capture import REQUESTS, read_jsonl
    from harness.summarize.modelled import on_card_time

    if not (pdir / REQUESTS).is_file():
        return None
    rows, _bad = read_jsonl(pdir / REQUESTS)
    rows = [r for r in on_card_time(rows) if not r.get("warmup")]
    if not rows:
        return None
    ts = [float(r["ttft_s"]) if r.get("ok") and r.get("ttft_s") is not None else math.nan for r in rows]
    return timing(ts, slo)


def row_fields(pred: Timing | None, meas: Timing | None) -> dict[str, Any]:
    """A confirm row's at-load keys: TTFT predicted/measured and SLO attainment predicted/measured."""
    if pred is None:
        return {}
    out: dict[str, Any] = {
        "ttft_ms": {"predicted": pred.to_dict()["ttft_ms"], "measured": None},
        "slo_attainment": {"predicted": pred.attainment, "measured": None},
    }
    if meas is not None:
        out["ttft_ms"]["measured"] = meas.to_dict()["ttft_ms"]
        out["slo_attainment"]["measured"] = meas.attainment
        p, m = pred.ttft_ms["p90"], meas.ttft_ms["p90"]
        out["ttft_p90_ratio"] = round(m / p, 4) if p > 0 else None
    return out
