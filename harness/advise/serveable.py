"""Whether a configuration serves the input at all, before it is ranked.

SGLang 0.5.23 rejects a request whose prompt plus output does not fit the device pool or the model's
context; the sim applies the same rule (harness.sim.engine.Engine.max_input_len: length in the trace's
units > min(context // unit, pool) - 1), and so does this module, so advise and the sim agree. A pool that
rejects any request the context does not already reject is no candidate. When today's pool or the card's
default rejects some, the levers that fix it come first, each with its launch line: the card's own memory
lever (`--mem-fraction-static`, FP8 KV), `--tp` across the node's GPUs, or a larger built-in card.

The sim has no tensor-parallel memory model: a pool on `--tp N` is modelled by
harness.advise.levers.tp_pool_tokens (N cards' room less the weights once). When one card cannot serve
the input and `--tp N` can, the advice itself runs on N GPUs (`Serveability.tp`: Levers(tp=N)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.advise.launch_line import LaunchLine, sglang_line
from harness.advise.levers import FP8_CAVEAT, Levers, tp_pool_tokens
from harness.sim.cards import CARDS
from harness.sim.timing import CardProfile, resolve_profile
from harness.whatif.grid import Config
from harness.whatif.trace import Trace

TP_SIZES = (2, 4, 8)


@dataclass(frozen=True)
class Rejects:
    """What one pool rejects of the input (counts and shares of requests and of prompt tokens)."""

    pool: int  # input units
    pool_tokens: int
    requests: int
    share: float
    token_share: float

    def to_dict(self) -> dict:
        return {
            "pool": self.pool,
            "pool_tokens": self.pool_tokens,
            "rejected_requests": self.requests,
            "rejected_share": round(self.share, 6),
            "rejected_token_share": round(self.token_share, 6),
        }


@dataclass(frozen=True)
class Fix:
    """One lever that makes room for the input, with what its pool still rejects."""

    kind: str  # default | fraction | fp8 | tp | card
    text: str
    rejects: Rejects
    launch: LaunchLine

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "text": self.text,
            **self.rejects.to_dict(),
            "launch": self.launch.to_dict(),
        }


@dataclass
class Serveability:
    today: Rejects
    default: Rejects
    context_tokens: int
    context_rejects: int  # requests longer than the context: no pool serves them
    start_pool: int  # where the recommendation starts: today's pool when it serves, else the lever's
    today_launch: LaunchLine
    tp: int = 1  # the --tp the recommendation runs on (> 1 only when one card cannot serve the input)
    fixes: list[Fix] = field(default_factory=list)
    headline: str = ""  # empty when today's pool and the card's default serve the input

    @property
    def flagged(self) -> bool:
        """Today's pool rejects requests a pool could serve."""
        return self.today.requests > self.context_rejects

    def to_dict(self) -> dict:
        return {
            "headline": self.headline,
            "today": self.today.to_dict() | {"flagged": self.flagged, "launch": self.today_launch.to_dict()},
            "card_default": self.default.to_dict(),
            "context_tokens": self.context_tokens,
            "context_rejected_requests": self.context_rejects,
            "start_pool": self.start_pool,
            "tp": self.tp,
            "fixes": [f.to_dict() for f in self.fixes],
        }


class Lengths:
    """Each request's prompt plus output in the trace's units (what the sim's rule compares), computed once
    so that any pool's rejections are one numpy comparison."""

    def __init__(self, trace: Trace, context_tokens: int) -> None:
        self.unit = trace.unit
        self.units = np.asarray([len(r.key) + len(r.output_key) for r in trace.requests], dtype=np.int64)
        self.tokens = np.asarray([r.tokens for r in trace.requests], dtype=np.int64)
        self.context_units = context_tokens // max(1, trace.unit)
        fits = self.units[self.units <= self.context_units - 1]
        self.need = (
            int(fits.max()) + 1 if fits.size else 1
        )  # the smallest pool that takes all the context does

    def rejects(self, pool: int) -> Rejects:
        over = self.units > min(self.context_units, pool) - 1
        n, total = len(self.units), max(int(self.tokens.sum()), 1)
        count = int(over.sum())
        return Rejects(pool, pool * self.unit, count, count / max(n, 1), int(self.tokens[over].sum()) / total)


def _pct(x: float) -> str:
    return f"{x:.1%}" if x >= 0.001 or x == 0 else f"{x:.2%}"


def fixes(
    lengths: Lengths, profile: CardProfile, levers: Levers, model: str | None, gpus: int
) -> tuple[list[Fix], int, int]:
    """One lever of each kind that serves the input (the least-rejecting of a kind when none does); the
    pool (input units) the recommendation starts from and the --tp it runs on: this card's own lever when
    one serves, else the smallest --tp that does, else the card's least-rejecting pool."""
    unit = levers.unit_tokens
    out: list[Fix] = []
    need = lengths.need
    lever = levers.pool_lever(need)
    top = levers.largest_pool_tokens()
    start, tp = (need if lever is not None else max((top or 0) // unit, 1)), 1
    card_lever = lever if lever is not None else levers.pool_lever(start)
    kind = card_lever.kind if card_lever is not None else "fraction"
    text = card_lever.text if card_lever is not None else f"a pool of {levers.size(start)}"
    out.append(Fix(kind, text, lengths.rejects(start), sglang_line(Config("lru", start), levers, model)))
    if lever is not None and lever.kind != "fp8":
        return out, start, tp  # the card's own memory serves it: no --tp, no other card
    tps = [(n, tp_pool_tokens(profile, n)) for n in TP_SIZES if n <= gpus]
    tps = [(n, t) for n, t in tps if t > 0]
    serving = [(n, t) for n, t in tps if t // unit >= need]
    for n, t in serving[:1] or tps[-1:]:
        units = need if serving else t // unit
        lv = Levers(profile, unit, levers.unit_name, tp=n)
        text = f"--tp {n}: the pool across {n} GPUs of the node, {t:,} tokens (bf16 KV, default fraction)"
        out.append(Fix("tp", text, lengths.rejects(units), sglang_line(Config("lru", units), lv, model)))
        if lever is None and lengths.rejects(units).requests < lengths.rejects(start).requests:
            start, tp = units, n
    hw = getattr(profile, "hw", None)
    bigger = sorted(
        (c for c in CARDS.values() if hw is not None and c.mem_gb > hw.mem_gb), key=lambda c: c.mem_gb
    )
    for c in bigger:
        prof = resolve_profile(c.name, model)
        if prof.default_pool_tokens // unit >= need:
            lv = Levers(prof, unit, levers.unit_name)
            text = f"a larger card, {c.gpu} (--card {c.name}): its default pool holds {prof.default_pool_tokens:,} tokens"
            out.append(Fix("card", text, lengths.rejects(need), sglang_line(Config("lru", need), lv, model)))
            break
    return out, start, tp


def _short(f: Fix) -> str:
    """A fix in the headline's words."""
    size = f"{f.rejects.pool_tokens:,} tokens"
    if f.kind == "fp8":
        what = f"FP8 KV (--kv-cache-dtype fp8_e4m3, {size}; {FP8_CAVEAT})"
    elif f.kind == "fraction":
        flag = f.text.split(" (")[0]
        what = f"{flag} ({size})"
    elif f.kind == "tp":
        what = f.text.split(":")[0] + f" ({size} across the GPUs)"
    elif f.kind == "card":
        what = f.text.split(":")[0] + f" ({size})"
    else:
        what = f"the card's default pool ({size})"
    return what + (f", still rejecting {_pct(f.rejects.share)}" if f.rejects.requests else "")


def serveability(
    lengths: Lengths,
    profile: CardProfile,
    levers: Levers,
    model: str | None,
    current: int,
    device: int,
    gpus: int,
) -> Serveability:
    """Today's and the card default's rejections, and (when either rejects) the levers that fix them."""
    floor = int((lengths.units > lengths.context_units - 1).sum())
    today, default = lengths.rejects(current), lengths.rejects(device)
    s = Serveability(
        today,
        default,
        profile.context_length,
        floor,
        current,
        sglang_line(Config("lru", current), levers, model),
    )
    if today.requests <= floor and default.requests <= floor:
        return s
    s.fixes, start, tp = fixes(lengths, profile, levers, model, gpus)
    if today.requests > floor:
        s.start_pool, s.tp = start, tp
    hw = getattr(profile, "hw", None)
    name = hw.name.upper() if hw is not None else ""
    where = f" on {'an' if name[:1] in 'AEFHILMNORSX' else 'a'} {name}" if name else ""
    bad = today if today.requests > floor else default
    who = "SGLang's default pool" if bad.pool == device else "Today's pool"
    text = (
        f"{who}{where} ({bad.pool_tokens:,} tokens) rejects {_pct(bad.share)} of the requests "
        f"({_pct(bad.token_share)} of the prompt tokens; prompt + output over the pool)"
    )
    if floor:
        text += f"; {floor:,} are longer than the model's context ({profile.context_length:,} tokens): no pool serves them"
    ok = [f for f in s.fixes if f.rejects.requests <= floor]
    if ok:
        text += ": launch with " + ", or ".join(_short(f) for f in ok)
    else:
        least = min(s.fixes, key=lambda f: f.rejects.requests)
        text += f": no lever reaches a pool that serves them all; the least-rejecting is {_short(least)}"
    s.headline = text + "."
    return s
