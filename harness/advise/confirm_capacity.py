"""`--confirm-capacity`: `harness bench`'s capacity search run live on the recommended configuration, over
the confirm's slice, beside the capacity predicted for that same slice (harness.advise.slice_capacity).

The search is bench's own (`search:` in the live spec; harness.sweep.search): its knob is the load's (a
trace's speedup, a Poisson rate, requests in flight), its range the predicted value / 3 to x 3, its SLO the
advice's TTFT bound at the bound's percentile with that share as the goodput target (TTFT p90 <= 2 s: 90 %
of the requests within 2 s). Measured capacity = the offered req/s of the highest passing probe.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.advise.capacity import Tried
from harness.advise.slice_capacity import Knob
from harness.advise.slo import DEFAULT_SLO, Slo
from harness.errors import HarnessError

SPREAD = 3.0  # the live search's range: predicted / 3 .. predicted x 3


@dataclass(frozen=True)
class CapacityCheck:
    """Predicted against measured capacity of one configuration on the slice."""

    config: str
    server_kind: str
    knob: str
    slo: str
    predicted_rps: float | None
    measured_rps: float | None
    predicted_knob: float | None
    measured_knob: float | None
    predicted: tuple[Tried, ...]
    probes: tuple[dict[str, Any], ...]  # bench's probes, each with its offered req/s
    stopped: str | None = None
    note: str | None = None  # why there is no figure to compare

    @property
    def ratio(self) -> float | None:
        p, m = self.predicted_rps, self.measured_rps
        return round(m / p, 4) if p and m is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "server_kind": self.server_kind,
            "knob": self.knob,
            "slo": self.slo,
            "predicted_rps": self.predicted_rps,
            "measured_rps": self.measured_rps,
            "ratio": self.ratio,
            "predicted_knob": self.predicted_knob,
            "measured_knob": self.measured_knob,
            "predicted_probes": [t.to_dict() for t in self.predicted],
            "probes": list(self.probes),
            "stopped": self.stopped,
            "note": self.note,
        }

    def sentence(self) -> str:
        def rps(v: float | None) -> str:
            return "none within the SLO" if v is None else f"{v:.3g} req/s"

        ratio = f" (measured / predicted {self.ratio:.2f})" if self.ratio is not None else ""
        head = f"Capacity of {self.config} on {self.server_kind} at {self.slo}, bench's search over {self.knob}: "
        if self.note:
            return head + self.note
        return head + f"predicted {rps(self.predicted_rps)}, measured {rps(self.measured_rps)}{ratio}."

    def table(self) -> tuple[list[str], list[list[str]]]:
        head = [self.knob, "offered req/s", "status", "goodput", "TTFT at percentile ms"]
        rows = []
        for p in self.probes:
            pct = p.get("at_percentile") or {}
            rows.append(
                [
                    f"{p['value']:g}",
                    "-" if p.get("offered_rps") is None else f"{p['offered_rps']:.3g}",
                    str(p["status"]),
                    "-" if p.get("goodput") is None else f"{p['goodput']:.3f}",
                    "-" if "ttft_ms" not in pct else f"{pct['ttft_ms']:,.0f}",
                ]
            )
        return head, rows


def search_dict(knob: Knob, around: float, slo: Slo) -> dict[str, Any]:
    """bench's `search:` mapping around the predicted knob value, judged by the SLO's TTFT bound."""
    ttft = slo.ttft_bound()
    terms: dict[str, float] = {"ttft_ms": ttft.ms}
    tpot = next((b for b in slo.capacity_bounds() if b.metric == "tpot"), None)
    if tpot is not None:
        terms["tpot_ms"] = tpot.ms
    lo, hi = around / SPREAD, around * SPREAD
    if knob.integer:
        lo, hi = max(1, math.floor(lo)), max(1, math.ceil(hi))
    else:
        lo, hi = float(f"{lo:.3g}"), float(f"{hi:.3g}")
    return {
        "knob": knob.name,
        "lo": lo,
        "hi": hi,
        "slo": {**terms, "percentile": ttft.percentile},
        "goodput": ttft.percentile / 100.0,
    }


def run_live_search(live: Any, server: dict[str, Any], search: dict[str, Any], opts: Any) -> dict[str, Any]:
    """bench's capacity search of the live spec on one server profile (`opts`: bench's options, as
    harness.advise.confirm builds them): search_result's dict."""
    from harness.capture.redact import spec_redactor
    from harness.spec import load_spec
    from harness.summarize.capacity import replay, search_result
    from harness.sweep.bench import run_plans
    from harness.sweep.plan import plan_experiment
    from harness.sweep.search import done_probes

    raw = dict(live.spec.raw)
    raw.pop("servers", None)
    raw["search"] = search
    raw["name"] = f"{live.spec.name}-capacity"
    capture: Path = opts.capture
    capture.mkdir(parents=True, exist_ok=True)
    path = capture / "capacity-spec.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    spec = dataclasses.replace(load_spec(path), servers_raw=[server], matrix_raw=None)
    plan = plan_experiment(spec, opts)
    outcome = run_plans([plan], opts, spec_redactor([spec]), lambda _msg: None)
    if outcome.server_failures:
        raise HarnessError(f"--confirm-capacity: {outcome.server_failures[0]}")
    assert spec.search is not None
    found = done_probes(spec, capture, opts.node, server["name"])
    return search_result(spec.search, replay(spec.search, found)[0])


def confirm_capacity(
    a: Any, launch: Any, opts: Any, sent: Any, cand: Any, live: Any, server: dict[str, Any], profile: Any
) -> CapacityCheck:
    """The recommended configuration's capacity on the slice: predicted by engine replays of the slice as
    sent, measured by bench's search on `launch.server_kind` (`opts`: bench's options for it)."""
    from harness.advise.confirm_load import live_config, live_trace
    from harness.advise.slice_capacity import predicted_capacity

    slo = launch.slo or DEFAULT_SLO
    trace = live_trace(sent, live.unit_tokens)
    cfg = live_config(cand.config, trace, live.unit_tokens)
    knob, best, tried = predicted_capacity(trace, cfg, a.load, profile, slo)
    label = cand.label()
    if all(t.meets for t in tried):  # nothing to search for: the slice never loads one replica that far
        top = max(tried, key=lambda t: t.scale)
        note = (
            f"not searched: the slice meets the SLO up to {knob.name} {top.scale:g} ({top.rps:.3g} req/s, every "
            "request nearly at once), so it cannot find the ceiling; a longer slice (--confirm-requests) can."
        )
        return CapacityCheck(label, launch.server_kind, knob.name, slo.describe(), None, None, None, None,
                             tuple(tried), (), None, note)  # fmt: skip
    around = best.scale if best is not None else knob.base
    res = run_live_search(live, server, search_dict(knob, around, slo), opts)
    probes = []
    for p in res["probes"]:
        p = dict(p)
        rps = p.get("requests_per_s")
        p["offered_rps"] = rps if knob.name == "concurrency" else knob.rps(float(p["value"]))
        probes.append(p)
    m = res.get("best")
    passed = next((p for p in probes if m is not None and p["value"] == m), None)
    return CapacityCheck(
        label,
        launch.server_kind,
        knob.name,
        slo.describe(),
        None if best is None else round(best.rps, 6),
        None if passed is None or passed["offered_rps"] is None else round(passed["offered_rps"], 6),
        None if best is None else best.scale,
        None if m is None else float(m),
        tuple(tried),
        tuple(probes),
        res.get("stopped"),
    )
