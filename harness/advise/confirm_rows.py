"""Each candidate's confirm row from its point folder: whole, partial (the confirm stopped while it ran:
measured over the requests it finished and, on a trace, predicted over those same requests), not run, or
failed. A failed or unstarted candidate reads as such, never as 0%."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.advise.grid import Candidate
from harness.sim.timing import CardProfile
from harness.whatif.replay import replay
from harness.whatif.trace import Trace


@dataclass(frozen=True)
class Measured:
    """What a candidate's point folder holds: its status and the answered requests' tokens."""

    status: str  # point.json's (ok, interrupted, failed, …); "none" before it was written
    indices: tuple[int, ...]  # schedule indices of the requests answered ok, warm-up left out
    prompt_tokens: int
    cached_tokens: int
    scheduled: int | None

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def read_point(pdir: Path) -> Measured:
    """The point's status and its ok requests (a stopped point keeps every record already taken)."""
    from harness.capture import POINT, REQUESTS, read_jsonl

    status, scheduled = "none", None
    if (pdir / POINT).is_file():
        try:
            rec = json.loads((pdir / POINT).read_text())
            status, scheduled = str(rec.get("status", "none")), rec.get("requests_scheduled")
        except (OSError, json.JSONDecodeError):
            pass
    rows: list[dict[str, Any]] = []
    if (pdir / REQUESTS).is_file():
        rows, _bad = read_jsonl(pdir / REQUESTS)
    ok = [r for r in rows if r.get("ok") and not r.get("warmup")]
    return Measured(
        status,
        tuple(int(r.get("index", i)) for i, r in enumerate(ok)),
        sum(int(r.get("prompt_tokens") or 0) for r in ok),
        sum(int(r.get("cached_tokens") or 0) for r in ok),
        scheduled if isinstance(scheduled, int) else None,
    )


def predicted_over(
    c: Candidate, sent: Trace | None, indices: tuple[int, ...], profile: CardProfile | None, page: int = 1
) -> float | None:
    """The candidate replayed on the requests that were answered (one at a time, in order, as sent);
    None when the input is not a trace sent in file order."""
    if sent is None or not indices or max(indices) >= len(sent.requests):
        return None
    part = dataclasses.replace(sent, requests=[sent.requests[i] for i in sorted(set(indices))])
    cfg = c.config
    if page > 1:
        cfg = dataclasses.replace(cfg, page_size=page, pool=cfg.pool // page * page)
    return replay(part, cfg, card=profile).hit_rate


def row(
    c: Candidate,
    server_kind: str,
    predicted: float,
    m: Measured | None,
    stopped: bool,
    partial_predicted: float | None = None,
) -> dict[str, Any]:
    """One candidate as the outputs' `confirmed` row. `m` None: its server never started a point."""
    ok = m is not None and m.status == "ok"
    partial = not ok and stopped and m is not None and m.prompt_tokens > 0
    status = "ok" if ok else "partial" if partial else "not run" if stopped else "failed"
    out: dict[str, Any] = {"config": c.label(), "server_kind": server_kind, "status": status}
    if partial and m is not None:
        p = partial_predicted if partial_predicted is not None else predicted
        out |= {
            "predicted_hit_rate": round(p, 6),
            "measured_hit_rate": round(m.hit_rate, 6),
            "difference_points": round((m.hit_rate - p) * 100, 3),
            "partial": True,
            "requests_done": len(m.indices),
            "requests_total": m.scheduled,
            "predicted_over": "the requests done" if partial_predicted is not None else "all requests",
        }
        return out
    measured = m.hit_rate if ok and m is not None else None
    return out | {
        "predicted_hit_rate": round(predicted, 6),
        "measured_hit_rate": None if measured is None else round(measured, 6),
        "difference_points": None if measured is None else round((measured - predicted) * 100, 3),
    }


BASE_HEAD = ["configuration", "server", "predicted", "measured", "difference"]
LOAD_HEAD = ["TTFT p90 ms predicted", "measured", "SLO attainment predicted", "measured"]


def table(rows: list[dict[str, Any]], cells: Any) -> tuple[list[str], list[list[str]]]:
    """The "Confirmed live" table (Markdown and page): `cells` is each row's hit-rate cells
    (harness.advise.markdown.confirmed_row); at a load, the TTFT p90 and SLO attainment beside them."""
    at_load = any("ttft_ms" in r for r in rows)
    head = BASE_HEAD + (LOAD_HEAD if at_load else [])
    out = []
    for r in rows:
        line = list(cells(r))
        if at_load:
            t, s = r.get("ttft_ms") or {}, r.get("slo_attainment") or {}
            line += [
                _ms((t.get("predicted") or {}).get("p90")),
                _ms((t.get("measured") or {}).get("p90")),
                _share(s.get("predicted")),
                _share(s.get("measured")),
            ]
        out.append(line)
    return head, out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"
