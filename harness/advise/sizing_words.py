"""The at-load answer in words: the headline's first sentence (GPUs needed with and without the
recommendation, or that no replica count meets the SLO) and the capacity table of advise.md.

One-request-at-a-time figures (the grid's, the steps') stay in their own columns and sentences; the
headline leads with the load because that is the question a serving team asks of a host tier.
"""

from __future__ import annotations

import math
from typing import Any

from harness.advise.load import AtLoad, Load
from harness.advise.slo import Slo


def card_name(profile: Any) -> str:
    """The card as a headline names it (H100), from the profile's datasheet entry when it has one."""
    hw = getattr(profile, "hw", None)
    name = hw.name if hw is not None else str(getattr(profile, "name", "GPU"))
    return name.upper()


def _gpus(
    n: int | None, card: str, most: int, rng: tuple[int, int] | None = None, est: int | None = None
) -> str:
    """GPUs needed in words: the count, its range within the card physics' error, or past the node's
    GPUs an estimate from one replica's capacity (dividing: labelled so, never the replayed figure)."""
    if n is None:
        more = f"more than {most} {card}s"
        return more + (f" (about {est} at one replica's capacity)" if est is not None and est > most else "")
    text = f"{n} {card}" + ("s" if n != 1 else "")
    if rng is not None and rng != (n, n):
        text += f" ({rng[0]}-{rng[1]} within the card physics' error)"
    return text


def _row(rows: list[AtLoad], role: str) -> AtLoad | None:
    return next((r for r in rows if r.role == role), None)


def _load_words(load: Load) -> str:
    if load.agents:
        return f"{load.concurrency} agents"
    if load.kind == "trace" and load.offered_rps:
        return f"{load.offered_rps:.2f} req/s"
    if load.kind == "rate":
        return f"{load.rate:g} req/s"
    return f"{load.concurrency} in flight"


def _ttft_bound(slo: Slo) -> tuple[float, float]:
    b = slo.ttft_bound()
    return b.percentile, b.ms


def headline(rows: list[AtLoad], load: Load, slo: Slo, card: str, most: int, longest_tokens: int) -> str:
    """The at-load sentence that leads the headline (empty when nothing was sized); for a closed loop,
    what one card holds follows it, in agents or requests in flight."""
    text = _gpus_sentence(rows, load, slo, card, most, longest_tokens)
    today, rec = _row(rows, "today"), _row(rows, "recommendation")
    if not text or load.kind != "concurrency" or today is None or rec is None:
        return text
    unit = "agents" if load.agents else "requests in flight"
    if all(r.capacity is None or r.capacity.scale is None for r in (today, rec)):
        return text

    def held(r: AtLoad) -> str:
        c = r.capacity
        if c is None or c.scale is None:
            return "none"
        return f"{c.scale:.0f}"

    return f"{text} One {card} holds {held(today)} {unit} within it with today's configuration, {held(rec)} with the recommendation."


def _gpus_sentence(
    rows: list[AtLoad], load: Load, slo: Slo, card: str, most: int, longest_tokens: int
) -> str:
    today, rec = _row(rows, "today"), _row(rows, "recommendation")
    if today is None or rec is None or today.capacity is None:
        return ""
    head = f"At your load ({_load_words(load)}, {slo.describe()})"
    pct, ms = _ttft_bound(slo)
    share = min(r.floor_share or 0.0 for r in (today, rec))
    if today.gpus_needed is None and rec.gpus_needed is None and share > 1 - pct / 100:
        return (
            f"{head} no number of {card}s meets the SLO: {share:.1%} of the requests take longer than "
            f"{ms / 1000:g} s to prefill even alone (prompts up to {longest_tokens:,} tokens), more than the "
            f"{100 - pct:g}% the p{pct:g} allows; levers: tensor parallelism (--tp 2 or more), a faster card "
            f"(--card), or a looser SLO (--slo ttft_p{pct:g}_ms=N)."
        )
    t, r = today.gpus_needed, rec.gpus_needed
    same_cfg = today.label == rec.label
    if t == 1 and (r == 1 or same_cfg):
        a, b = today.needed_figures, rec.needed_figures
        key = next(iter(a), None)
        fig = (
            f": TTFT p{pct:g} at load {a[key] / 1000:.2f} -> {b.get(key, a[key]) / 1000:.2f} s" if key else ""
        )
        return f"{head} one {card} meets the SLO with today's configuration and with the recommendation{fig}."
    today_n = _gpus(t, card, most, today.gpus_needed_range, _estimate(today, load))
    if same_cfg:
        return f"{head} today's configuration needs {today_n}; no change the steps found saves one."
    tier = "HiCache" if "host" in rec.label and "host" not in today.label else "the recommendation"
    if t is not None and t == r:
        return (
            f"{head}: today's configuration and the recommendation ({rec.label}) both need {today_n}: "
            f"{tier} saves no GPU at this load."
        )
    rec_n = _gpus(r, card, most, rec.gpus_needed_range, _estimate(rec, load))
    text = f"{head}: today's configuration needs {today_n}, the recommendation ({rec.label}) {rec_n}"
    if t is not None and r is not None and r < t:
        text += f": {tier} saves {t - r} of {t} GPUs"
    elif t is None and r is not None:
        text += f": it serves the load where today's configuration cannot on {most}"
    elif t is not None and r is not None and r > t:
        text += " (more at this load: its one-at-a-time gain does not hold here)"
    return text + "."


def _estimate(r: AtLoad, load: Load) -> int | None:
    """Replicas x tp by one replica's capacity, for a load past the node's GPUs (an open loop's)."""
    c = r.capacity
    offered = load.offered_rps if load.kind == "trace" else (load.rate if load.kind == "rate" else None)
    if c is None or not c.rps or not offered:
        return None
    return math.ceil(offered / c.rps - 1e-9) * r.tp


CAP_HEAD = [
    "shown as",
    "configuration",
    "capacity req/s (1 replica)",
    "hit rate there",
    "GPUs needed at your load",
    "at your load",
    "SLO at your load",
]


def capacity_row(r: AtLoad, most: int, closed: bool = False) -> list[str]:
    """One row of the capacity table; `closed`: a closed loop's capacity is what it holds at once."""
    c = r.capacity
    if c is None:
        return [r.role, r.label, "-", "-", "-", "-", "-"]
    if c.rps is not None and c.scale is not None and closed:
        cap = f"{c.scale:.0f} at once ({c.rps:.3g} req/s)"
    elif c.rps is None:
        cap = "none: " + (
            f"{r.floor_share:.1%} miss it alone" if not c.tried else "misses even at 1/64 of your load"
        )
    else:
        cap = f"{c.rps:.3g}"
        if c.low_rps is not None and c.high_rps is not None:
            cap += f" ({c.low_rps:.3g}-{c.high_rps:.3g})"
    need = (
        "-"
        if c.rps is None and r.gpus_needed is None
        else (str(r.gpus_needed) if r.gpus_needed is not None else f"> {most}")
    )
    if r.gpus_needed_range is not None and r.gpus_needed_range[0] != r.gpus_needed_range[1]:
        need += f" ({r.gpus_needed_range[0]}-{r.gpus_needed_range[1]})"
    state = "overloaded (queue grows)" if r.overloaded else "keeps up"
    slo = ", ".join(f"{k.split(' <=')[0]} {v / 1000:.2f} s" for k, v in r.slo_figures.items())
    if r.attainment is not None:
        slo += f"; {r.attainment:.0%} of requests within"
    hit = f"{c.hit_rate:.1%}" if c.hit_rate is not None else "-"
    return [r.role, r.label, cap, hit, need, f"{state} on {r.replicas}", slo or "-"]


def markdown(rows: list[AtLoad], load: Load, slo: Slo, most: int) -> list[str]:
    """The capacity section of advise.md."""
    if not rows or rows[0].capacity is None:
        return []
    out = [
        "",
        "## Capacity at the SLO",
        "",
        f"SLO: {slo.describe()}. Capacity is the highest offered load one replica serves within it with its "
        f"queue steady (the input's load x a factor: doubled or halved from 1, then bisected); GPUs needed "
        f"is the fewest replicas behind the modelled router, replayed at {load.describe()}, up to the "
        f"node's {most} GPUs. An overloaded row's TTFT keeps growing with the replay's length: it is no "
        "steady figure.",
        "",
    ]
    out += ["| " + " | ".join(CAP_HEAD) + " |", "|" + "---|" * len(CAP_HEAD)]
    closed = load.kind == "concurrency"
    out += ["| " + " | ".join(capacity_row(r, most, closed)) + " |" for r in rows]
    return out
