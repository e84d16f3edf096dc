"""The miss anatomy in words and in a chart: which class of miss dominates an experiment and each of its
servers (an eviction policy x pool, a routing policy), and the lever that addresses it (docs/miss-anatomy.md)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from harness.report.common import server_policy, server_pool
from harness.summary import Point, Server
from harness.summary.anatomy import CLASSES, MISSES, WORDS, MissAnatomy

SHORT = {
    "hit": "hit",
    "first_seen": "first seen",
    "evicted": "evicted",
    "elsewhere": "held elsewhere",
    "in_flight": "in flight",
}
COLORS = {
    "hit": "#4c9a2a",
    "first_seen": "#b0b0b0",
    "evicted": "#d1495b",
    "elsewhere": "#edae49",
    "in_flight": "#00798c",
}


def point_anatomy(p: Point) -> MissAnatomy | None:
    a = p.median.get("miss_anatomy")
    if isinstance(a, MissAnatomy):
        return a
    return MissAnatomy.model_validate(a) if isinstance(a, dict) else None


def _group(name: str, entry: Server | None) -> str:
    """The lever's unit: a routing policy (and replica count) behind a gateway, else the server."""
    reps = entry.replicas if entry is not None else None
    if isinstance(reps, dict) and reps.get("policy"):
        return f"{reps.get('policy')} x{reps.get('replicas')}"
    return f"`{name}` ({server_policy(entry)}, pool {server_pool(entry)})"


def _total(anats: list[MissAnatomy]) -> dict[str, int]:
    return {c: sum(a.tokens(c) for a in anats) for c in ("prompt_tokens", *CLASSES)}


def _lever(cls: str, anats: list[MissAnatomy]) -> str:
    """The lever for a class, with the what-if replay's share where one was replayed (the change replayed
    for the most evicted tokens, over the points that replayed it)."""
    if cls == "evicted":
        replayed = [a for a in anats if a.lever is not None and a.evicted]
        if replayed:
            change = max(replayed, key=lambda a: a.evicted).lever
            same = [a for a in replayed if a.lever and change and a.lever.change == change.change]
            ev = sum(a.evicted for a in same)
            held = sum(a.lever.held_share * a.evicted for a in same if a.lever) / ev
            return (
                f"{change.change if change else ''} would have held {held:.0%} of them, by the what-if replay"
            )
        return "a bigger pool or a host tier is the lever"
    return {
        "elsewhere": "a router that sends a prefix where it is held (cache_aware) or a shared L3 is the lever",
        "in_flight": "fewer requests in flight is the lever",
        "first_seen": "no cache catches them",
    }[cls]


def _catchable(t: dict[str, int]) -> str | None:
    """The largest class a cache could have caught (not first seen), None when there is none."""
    best = max(("evicted", "elsewhere", "in_flight"), key=lambda c: t[c])
    return best if t[best] > 0 else None


def anatomy_findings(points: list[Point], servers: dict[str, Server]) -> list[str]:
    """The experiment's dominant miss class and its lever; then each eviction or routing policy's."""
    groups: dict[str, list[MissAnatomy]] = {}
    for p in points:
        a = point_anatomy(p)
        if a is not None:
            groups.setdefault(_group(p.server, servers.get(p.server)), []).append(a)
    every = [a for v in groups.values() for a in v]
    tot = _total(every)
    misses = tot["prompt_tokens"] - tot["hit"]
    if not every or misses <= 0:
        return []
    dom = max(MISSES, key=lambda c: tot[c])
    head = f"{tot[dom] / misses:.0%} of the misses were {WORDS[dom]}; {_lever(dom, every)}"
    rest = _catchable(tot) if dom == "first_seen" else None
    if rest is not None:
        head += (
            f"; of the rest, {tot[rest] / (misses - tot[dom]):.0%} were {SHORT[rest]}: {_lever(rest, every)}"
        )
    out = [head + "."]
    if len(groups) < 2:
        return out
    parts = []
    for name in sorted(groups):
        t = _total(groups[name])
        m = t["prompt_tokens"] - t["hit"]
        c = _catchable(t)
        if m <= 0 or c is None:
            parts.append(f"{name} lost nothing a cache could catch")
            continue
        lever = f" ({_lever(c, groups[name])})" if c == "evicted" and groups[name][0].lever else ""
        routed = (
            f", {t['elsewhere'] / t['prompt_tokens']:.0%} held elsewhere"
            if c != "elsewhere" and t["elsewhere"] >= 0.005 * t["prompt_tokens"]
            else ""
        )
        parts.append(f"{name} {t[c] / t['prompt_tokens']:.0%} of its prompt tokens {SHORT[c]}{routed}{lever}")
    out.append(f"Catchable misses: {'; '.join(parts[:8])}.")
    return out


def anatomy_chart(points: list[Point], out: Path, title: str) -> Path | None:
    """One stacked bar per point: its prompt tokens by class, as shares (the median seed's anatomy)."""
    return out if _draw(points, out, title) else None


def _draw(points: list[Point], out: Path | BinaryIO, title: str) -> bool:
    rows = [(p, a) for p in points if (a := point_anatomy(p)) is not None and a.prompt_tokens]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.2))
    labels = [p.server if p.point_key == "default" else f"{p.server}\n{p.point_key}" for p, _ in rows]
    bottom = [0.0] * len(rows)
    for cls in CLASSES:
        vals = [100.0 * a.tokens(cls) / a.prompt_tokens for _, a in rows]
        ax.bar(range(len(rows)), vals, bottom=bottom, color=COLORS[cls], label=SHORT[cls])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("% of prompt tokens")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend(fontsize=7, ncols=5, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    fig.tight_layout()
    fig.savefig(out, dpi=110, format="png")
    plt.close(fig)
    return True


def anatomy_img(points: list[Point], title: str) -> str:
    """The chart inline, for the self-contained HTML page (its CSP allows data: images); "" without data."""
    import base64
    import io

    buf = io.BytesIO()
    if not _draw(points, buf, title):
        return ""
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<figure class="anatomy"><img alt="miss anatomy per point" src="data:image/png;base64,{data}"></figure>'
