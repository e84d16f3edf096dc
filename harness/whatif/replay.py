"""Offline what-if replay: a trace through SGLang's cache semantics for each policy x pool x host tier.

Two paths, chosen by the input:
- Mooncake traces (no concurrency, no conversations): requests run one at a time in arrival order
  through `harness.sim.radix.serve_request` (match, load back a host hit, evict max(shortfall, page)
  with the prefix locked, insert): the cache decisions of a server whose requests do not overlap; TTFT
  is the card profile's service time (prefill of the uncached part + load-back), without queueing. Fast:
  well under a second per configuration on the 12k-request trace.
- experiment specs and captures (a concurrency, multi-turn sessions): the requests go through the sim's
  own scheduler (`harness.sim.simulate.simulate`, virtual time) as the load generator sends them: at most
  `concurrency` in flight, a session's next turn ready when its previous one finishes, the lowest ready
  schedule index first. Batching, chunked prefill, admission and the running requests' locks are the
  live sim's; TTFT includes queueing. With concurrency 1 the result equals a live `harness serve-sim`
  run of the same spec request for request (tests/whatif/test_whatif.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from harness.sim.timing import CardProfile
from harness.whatif import serve
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace, TraceRequest
from harness.whatif.result import Result
from harness.whatif.serve import closed_loop, engine_config, tier_seconds, tier_tokens

__all__ = [
    "Result",
    "closed_loop",
    "diagnose",
    "engine_config",
    "ideal_hits",
    "remember_ideal",
    "replay",
    "replay_engine",
    "replay_sequential",
    "sweep",
    "sweep_then",
    "tier_seconds",
    "tier_tokens",
]

T = TypeVar("T")

if TYPE_CHECKING:  # the engine is imported when a replay needs it (see replay_engine)
    from harness.sim.engine import EngineConfig


# the last trace's answer (its requests, kind, page size): advise sweeps one trace several times
_IDEAL: tuple[tuple[TraceRequest, ...], str, int, list[int]] | None = None


def ideal_hits(trace: Trace, page_size: int = 1) -> list[int]:
    """Per request, the longest prefix (key units) any earlier request cached: an unbounded cache's hit.

    Earlier requests leave their prompt and answer (but its last token) in the cache; token traces match
    at most all but the last prompt token, as the scheduler does. The same requests (the very objects,
    TraceRequest is frozen) get the last answer again; callers read it, never change it."""
    global _IDEAL
    reqs = tuple(trace.requests)
    last = _IDEAL
    if last is not None and last[1] == trace.kind and last[2] == page_size and last[0] == reqs:
        return last[3]
    out = _ideal_hits(trace, page_size)
    _IDEAL = (reqs, trace.kind, page_size, out)
    return out


def remember_ideal(trace: Trace, page_size: int, hits: list[int]) -> None:
    """Take `hits` as the trace's ideal_hits (computed elsewhere, e.g. by advise's one-pass curve, which
    finds them on the way), so the replays that follow read them rather than build the trie again."""
    global _IDEAL
    if len(hits) != len(trace.requests):
        raise ValueError(f"{len(hits)} ideal hits for {len(trace.requests)} requests")
    _IDEAL = (tuple(trace.requests), trace.kind, page_size, hits)


def _ideal_hits(trace: Trace, page_size: int) -> list[int]:
    root: dict = {}
    out = []
    tokens = trace.kind == "tokens"  # the scheduler never reuses the last prompt token; see replay()
    for r in trace.requests:
        cut = len(r.key) - 1 if tokens else len(r.key)
        key = r.key[: max(cut, 0) // page_size * page_size]
        node, m = root, 0
        for i in range(0, len(key), page_size):
            k = key[i] if page_size == 1 else key[i : i + page_size]
            nxt = node.get(k)
            if nxt is None:
                break
            node, m = nxt, m + page_size
        out.append(m)
        full = r.key + r.output_key[:-1]
        full = full[: len(full) // page_size * page_size]
        for i in range(m, len(full), page_size):
            k = full[i] if page_size == 1 else full[i : i + page_size]
            node = node.setdefault(k, {})
    return out


def replay(
    trace: Trace, cfg: Config, ideal: list[int] | None = None, card: str | CardProfile | None = None
) -> Result:
    """One configuration over the whole trace, in virtual time: through the scheduler when the input has
    a concurrency (specs, captures), else one request at a time."""
    if trace.concurrency is not None or cfg.storage:  # L3 lives in the engine
        return replay_engine(trace, cfg, ideal, card)
    return replay_sequential(trace, cfg, ideal, card)


def replay_sequential(
    trace: Trace, cfg: Config, ideal: list[int] | None = None, card: str | CardProfile | None = None
) -> Result:
    """Requests one at a time in trace order (a counter clock), through serve_request."""
    ideal = ideal if ideal is not None else ideal_hits(trace, cfg.page_size)
    return serve.sequential(trace, cfg, ideal, card).result


def replay_engine(
    trace: Trace,
    cfg: Config,
    ideal: list[int] | None = None,
    card: str | CardProfile | None = None,
    econf: EngineConfig | None = None,
) -> Result:
    """The trace through the sim's scheduler in virtual time, at the input's concurrency (closed loop).

    econf: a whole EngineConfig (a live server's own, e.g. rebuilt from its server_info) instead of
    cfg's cache settings on `card`'s defaults."""
    ideal = ideal if ideal is not None else ideal_hits(trace, cfg.page_size)
    return serve.engine(trace, cfg, ideal, card, econf).result


_WORK: tuple[Trace, list[int], str | CardProfile | None, Callable[[Config, Result], Any] | None] | None = None


def _run_one(cfg: Config) -> Any:
    assert _WORK is not None, "sweep() sets the work before the pool forks"
    trace, ideal, card, then = _WORK
    res = replay(trace, cfg, ideal if cfg.page_size == 1 else None, card)
    return res if then is None else (res, then(cfg, res))


def _pool(
    trace: Trace,
    configs: list[Config],
    card: str | CardProfile | None,
    workers: int | None,
    then: Callable[[Config, Result], Any] | None,
) -> list[Any]:
    global _WORK
    ideal = ideal_hits(trace, 1)
    _WORK = (trace, ideal, card, then)
    from harness.whatif.forked import fork_map

    return fork_map(_run_one, configs, workers)


def sweep(
    trace: Trace, configs: list[Config], card: str | CardProfile | None = None, workers: int | None = None
) -> list[Result]:
    """Every configuration, across a process pool (fork: the trace is shared, not pickled per task)."""
    return _pool(trace, configs, card, workers, None)


def sweep_then(
    trace: Trace,
    configs: list[Config],
    then: Callable[[Config, Result], T],
    card: str | CardProfile | None = None,
    workers: int | None = None,
) -> list[tuple[Result, T]]:
    """sweep, and `then` on each result in the process that replayed it (its cost shared by the pool)."""
    return _pool(trace, configs, card, workers, then)


def diagnose(trace: Trace, ideal: list[int], threshold: float = 0.2) -> list[str]:
    """Why the ceiling is low: later turns that stop matching their own session's previous request."""
    notes: list[str] = []
    total = sum(r.tokens for r in trace.requests)
    ceiling = sum(trace.hit_tokens(r, i) for r, i in zip(trace.requests, ideal, strict=True)) / max(total, 1)
    last: dict[int, tuple[int, int]] = {}
    at_answer, inside = [], []
    for r, i in zip(trace.requests, ideal, strict=True):
        if r.session is None:
            continue
        prev = last.get(r.session)
        if prev is not None:
            plen, alen = prev
            if i < plen:
                inside.append((r.session, r.turn, i, plen))
            elif alen and i < min(plen + alen, len(r.key)):
                at_answer.append((r.session, r.turn, i, plen))
        last[r.session] = (len(r.key), max(len(r.output_key) - 1, 0))  # the last answer token is never cached
    if at_answer:
        s, t, i, plen = at_answer[0]
        notes.append(
            f"{len(at_answer)} later turns stop matching where the previous answer starts (e.g. session {s} "
            f"turn {t} matches {i} units, the previous prompt had {plen}): the history does not carry the "
            "answer as generated, e.g. a chat template that drops the previous answer's reasoning"
        )
    if inside:
        s, t, i, plen = inside[0]
        notes.append(
            f"{len(inside)} later turns stop matching inside the previous prompt (e.g. session {s} turn {t} "
            f"matches {i} of {plen} units): the history was rewritten or truncated"
        )
    if ceiling < threshold and not (at_answer or inside):
        notes.append(f"ideal hit rate is {ceiling:.1%}: little prefix sharing in this input")
    return notes
