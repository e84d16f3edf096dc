"""Every point's miss anatomy: each prompt token of the requests as sent, classed by what became of it.

One exact (unbounded) token tree per point holds every request's prompt and answer as they were sent, in
send order and by worker, each node stamped with when it became available on each worker (a prompt when
its first token came back, an answer when it finished). A request's reported cached tokens are `hit`;
the rest of its prompt is classed by how far each tree view matches it (the views nest, so the classes
sum to the prompt exactly):
  evicted    up to what its own worker had available before it was sent;
  in_flight  up to what its own worker had been sent, still prefilling or decoding;
  elsewhere  up to what any other worker had available;
  in_flight  up to what any earlier request had been sent;
  first_seen the rest (also the last prompt token and a partial last page: never cacheable).
The ids are the what-if engine's (harness.whatif.captured.read_capture: the ids the server saw).
Docs: docs/miss-anatomy.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.summarize.read import SeedCapture
from harness.summary.anatomy import MISSES, Anatomy, Lever, MissAnatomy
from harness.summary.figures import Figures

LEVER_MIN_SHARE = 0.1  # replay a bigger tier only when evicted tokens are at least this share of the misses


@dataclass(frozen=True)
class Sent:
    """One request as sent: its ids, where it went, when its parts entered that worker's cache."""

    key: tuple[int, ...]
    answer: tuple[int, ...]
    worker: int
    sent: float
    prefilled: float | None  # its prompt in the worker's tree (None: never: a failed request)
    done: float | None  # its answer too
    cached: int
    prompt_tokens: int
    counted: bool = True  # an ok request: its tokens count in the hit rate


class _Node:
    __slots__ = ("avail", "children")

    def __init__(self) -> None:
        self.children: dict[Any, _Node] = {}
        self.avail: dict[int, float] = {}  # worker -> earliest time this prefix was in its cache


def classify(
    requests: Sequence[Sent], page_size: int = 1
) -> tuple[dict[str, int], dict[int, dict[str, int]]]:
    """Token counts per class over the counted requests, in total and per worker (requests in send order)."""
    root = _Node()
    page = max(1, page_size)
    total = dict.fromkeys(("prompt_tokens", "hit", *MISSES), 0)
    per: dict[int, dict[str, int]] = {}

    for r in sorted(requests, key=lambda r: r.sent):
        # the scheduler never reuses a prompt's last token; a hit is whole pages
        limit = max(len(r.key) - 1, 0) // page * page
        node, depth = root, 0
        own_sent = own_done = any_done = depth_all = 0
        alive = [True, True, True]  # own worker sent, own worker available, any worker available
        while depth < limit:
            nxt = node.children.get(r.key[depth] if page == 1 else r.key[depth : depth + page])
            if nxt is None:
                break
            node, depth = nxt, depth + page
            depth_all = depth
            if alive[0] and r.worker in node.avail:
                own_sent = depth
            else:
                alive[0] = False
            if alive[1] and node.avail.get(r.worker, math.inf) <= r.sent:
                own_done = depth
            else:
                alive[1] = False
            if alive[2] and min(node.avail.values(), default=math.inf) <= r.sent:
                any_done = depth
            else:
                alive[2] = False
        if r.counted:
            n = r.prompt_tokens
            h = min(max(r.cached, 0), n)
            b1 = min(max(h, own_done), n)
            b2 = min(max(b1, own_sent), n)
            b3 = min(max(b2, any_done), n)
            b4 = min(max(b3, depth_all), n)
            got = {
                "prompt_tokens": n,
                "hit": h,
                "evicted": b1 - h,
                "in_flight": (b2 - b1) + (b4 - b3),
                "elsewhere": b3 - b2,
                "first_seen": n - b4,
            }
            w = per.setdefault(r.worker, dict.fromkeys(total, 0))
            for k, v in got.items():
                total[k] += v
                w[k] += v
        _insert(root, r, page)
    return total, per


def _insert(root: _Node, r: Sent, page: int) -> None:
    """The request's prompt (available at `prefilled`) and answer but its last token (at `done`)."""
    if r.prefilled is None:
        return
    full = r.key + r.answer[:-1] if r.done is not None else r.key
    full = full[: len(full) // page * page]
    node = root
    for i in range(0, len(full), page):
        k = full[i] if page == 1 else full[i : i + page]
        node = node.children.setdefault(k, _Node())
        t = r.prefilled if i + page <= len(r.key) else r.done
        assert t is not None
        if t < node.avail.get(r.worker, math.inf):
            node.avail[r.worker] = t


# ---------------------------------------------------------------- a capture point's seed


def _tier(info: dict[str, Any] | None) -> str:
    info = info or {}
    if info.get("hicache_storage_backend"):
        return "storage"
    return "host" if info.get("enable_hierarchical_cache") else "device"


def _hit_tiers(fig: dict[str, Any]) -> tuple[dict[str, int] | None, str | None]:
    """The hits' tier split: usage where it gives one, else the server's counters by cache_source."""
    for source, fmt in (("usage", "cached_{}_tokens"), ("counters", "counter_cached_{}_tokens")):
        parts = {t: fig.get(fmt.format(t)) for t in ("device", "host", "storage")}
        if any(isinstance(v, int | float) and not isinstance(v, bool) for v in parts.values()):
            return {t: int(v) for t, v in parts.items() if isinstance(v, int | float)}, source
    return None, None


def seed_sent(sc: SeedCapture, info: dict[str, Any] | None) -> tuple[list[Sent], list[str]]:
    """A seed's requests as sent, with the ids the server saw, and its workers' names (w0, …)."""
    from harness.whatif.captured import read_capture

    trace = read_capture(Path(sc.path), info)
    live = {r["index"]: r for r in sc.requests if r.get("sent_mono") is not None and not r.get("warmup")}
    urls = {url: name for name, url in ((sc.point or {}).get("workers") or {}).items()}
    names = sorted(set(urls.values())) or ["server"]
    out = []
    for t in trace.requests:
        rec = live[t.index]
        w = urls.get(str(rec.get("worker")), names[0])
        ok = bool(rec.get("ok"))
        out.append(
            Sent(
                key=t.key,
                answer=t.output_key,
                worker=names.index(w),
                sent=float(rec["sent_mono"]),
                prefilled=rec.get("first_token_mono") if ok or rec.get("first_token_mono") else None,
                done=rec.get("done_mono") if ok else None,
                cached=int(rec.get("cached_tokens") or 0),
                prompt_tokens=int(rec.get("prompt_tokens") or t.tokens),
                counted=ok,
            )
        )
    return out, names


def seed_anatomy(sc: SeedCapture, info: Any, fig: Figures) -> Figures:
    """`miss_anatomy` of one point x seed, or `miss_anatomy_why` when the ids sent cannot be rebuilt."""
    info = info if isinstance(info, dict) else None
    if not sc.requests:
        return Figures()
    try:
        sent, names = seed_sent(sc, info)
    except (HarnessError, KeyError) as e:
        return Figures(miss_anatomy_why=str(e) if isinstance(e, HarnessError) else f"record {e} missing")
    page = int((info or {}).get("page_size") or 1)
    total, per = classify(sent, page)
    tiers, source = _hit_tiers(fig.to_json())
    out = MissAnatomy(
        **total,
        evicted_from=_tier(info),
        seed=str(sc.seed),
        **({"hit_tiers": tiers, "hit_tiers_source": source} if tiers else {}),
        **({"workers": {names[w]: Anatomy(**v) for w, v in sorted(per.items())}} if len(names) > 1 else {}),
    )
    return Figures(miss_anatomy=out)


def median_anatomy(
    median: dict[str, Any], figs: list[dict[str, Any]], seeds: list[SeedCapture], info: Any, replicas: int
) -> None:
    """The median's anatomy is the seed at the median hit rate (a class-by-class median would not sum),
    with its lever (one instance whose evicted tokens are at least LEVER_MIN_SHARE of the misses)."""
    have = [f for f in figs if isinstance(f.get("miss_anatomy"), dict)]
    if not have:
        median.pop("miss_anatomy", None)
        return

    def rate(f: dict[str, Any]) -> float:
        a = f["miss_anatomy"]
        return a["hit"] / a["prompt_tokens"] if a.get("prompt_tokens") else 0.0

    fig = dict(sorted(have, key=rate)[(len(have) - 1) // 2]["miss_anatomy"])
    median["miss_anatomy"] = fig
    a = MissAnatomy.model_validate(fig)
    if replicas > 1 or a.evicted <= 0 or a.evicted < LEVER_MIN_SHARE * a.misses():
        return
    from harness.summarize.prediction import engine_from_info

    econf = engine_from_info(info)
    sc = next((s for s in seeds if str(s.seed) == a.seed), None)
    if isinstance(econf, str) or sc is None:
        return
    try:
        fig["lever"] = replay_lever(sc, econf, info, a.evicted).to_json()
    except HarnessError:
        return


def replay_lever(sc: SeedCapture, econf: Any, info: Any, evicted: int) -> Lever:
    """Replay the seed as sent on its own configuration and on one with a bigger tier."""
    import dataclasses

    from harness.whatif.grid import Config
    from harness.whatif.inputs import read_capture
    from harness.whatif.replay import replay_engine

    trace = read_capture(Path(sc.path), info if isinstance(info, dict) else None)
    cfg = Config(policy=econf.policy, pool=int(econf.pool_tokens), page_size=econf.page_size)
    base = replay_engine(trace, cfg, econf=econf)
    if econf.hicache:
        alt = dataclasses.replace(econf, pool_tokens=2 * int(econf.pool_tokens))
        change = "a pool of 2x"
    else:
        alt = dataclasses.replace(econf, hicache=True, hicache_ratio=2.0)
        change = "a host tier of 2x the pool"
    more = replay_engine(trace, cfg, econf=alt)
    gained = max(0, more.hit_tokens - base.hit_tokens)
    return Lever(
        change=change,
        held_share=min(1.0, gained / evicted) if evicted else 0.0,
        hit_rate=more.hit_rate,
        base_hit_rate=base.hit_rate,
    )


def replayed_sent(trace: Any, cached: Sequence[int], worker_of: Sequence[int] | None = None) -> list[Sent]:
    """A one-request-at-a-time what-if replay's requests as `Sent` (each done before the next is sent)."""
    return [
        Sent(
            key=r.key,
            answer=r.output_key,
            worker=worker_of[i] if worker_of is not None else 0,
            sent=float(i),
            prefilled=i + 0.5,
            done=i + 0.5,
            cached=c,
            prompt_tokens=r.tokens,
        )
        for i, (r, c) in enumerate(zip(trace.requests, cached, strict=True))
    ]
