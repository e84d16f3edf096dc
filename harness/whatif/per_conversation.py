"""Per-conversation hit rates: the token-weighted distribution (p10, p50, p90) of each conversation's
own hit rate, beside the overall one, so one thrashing session is not hidden in an average.

Each conversation weighs its prompt tokens: p50 is the rate of the conversation holding the median
prompt token (sorted by rate), as the overall rate weighs tokens too. Shared by the summary (which
comes later in the layers: harness.summarize.figures, per point and worker) and the what-if results.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

QUANTILES = {"p10": 0.1, "p50": 0.5, "p90": 0.9}


def per_conversation_hit_rate(rows: Iterable[tuple[object, float, float]]) -> dict[str, float | int] | None:
    """{p10, p50, p90, conversations} over (conversation, hit tokens, prompt tokens) per request; None
    when no request names a conversation (a Mooncake trace, shared-prefix groups)."""
    hit: dict[object, float] = {}
    prompt: dict[object, float] = {}
    for conv, h, p in rows:
        if conv is None:
            continue
        hit[conv] = hit.get(conv, 0.0) + h
        prompt[conv] = prompt.get(conv, 0.0) + p
    keys = [k for k in prompt if prompt[k] > 0]
    if not keys:
        return None
    rates = np.array([hit[k] / prompt[k] for k in keys])
    weights = np.array([prompt[k] for k in keys])
    order = np.argsort(rates, kind="stable")
    cum = np.cumsum(weights[order]) / weights.sum()
    out: dict[str, float | int] = {
        name: float(rates[order][min(int(np.searchsorted(cum, q)), len(keys) - 1)])
        for name, q in QUANTILES.items()
    }
    out["conversations"] = len(keys)
    return out
