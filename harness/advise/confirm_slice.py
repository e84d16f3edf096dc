"""`--confirm-requests N`: confirm on a contiguous slice of a trace, the pool scaled to the slice.

The slice is the trace's first N requests (written as a Mooncake file beside the live spec). A slice
reuses less than the whole trace, so each candidate's pool is scaled by the slice's working set over the
whole trace's (the distinct key elements that two or more requests share): the scaled pool holds the
same share of what the slice reuses as the full pool holds of what the trace reuses. The scaled pool is
not below the slice's longest request (prompt and the answer sent live, both in the key's unit) plus one,
nor above the candidate's own pool. The prediction is the candidate replayed on the slice
at the scaled pool, so predicted and measured are the same traffic on the same pool.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

from harness.advise.confirm_info import SliceScale
from harness.advise.grid import Candidate
from harness.advise.physics import model
from harness.errors import HarnessError
from harness.sim.timing import CardProfile
from harness.whatif.replay import replay
from harness.whatif.trace import Trace


def reused_units(trace: Trace) -> int:
    """Distinct key elements that two or more requests carry (a block trace's ids are whole prefixes)."""
    seen: Counter[int] = Counter()
    for r in trace.requests:
        seen.update(set(r.key))
    return sum(1 for c in seen.values() if c > 1)


def slice_file(path: Path, n: int, work: Path) -> Path:
    """The trace's first `n` requests, as a Mooncake file in `work`."""
    if path.suffix not in (".jsonl", ".json") or path.is_dir():
        raise HarnessError(f"--confirm-requests: {path}: a slice is taken of a Mooncake trace only")
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"{path.stem}-first-{n}.jsonl"
    kept = 0
    with path.open() as src, out.open("w") as dst:
        for line in src:
            if kept >= n:
                break
            if line.strip():
                dst.write(line)
                kept += 1
    return out


def pool_floor(part: Trace, live_unit: int = 1) -> int:
    """The slice's longest request in key elements, prompt and answer as sent live, plus one: a smaller
    pool cannot hold it. `live_unit`: tokens sent live per key element; the answer is sent shrunk as the
    prompt is (harness.advise.live_spec.shrunk_answers), so its tokens are scaled the same way."""
    shrink = live_unit / part.unit if part.kind == "blocks" and live_unit < part.unit else 1.0
    longest = max(
        (
            len(r.key)
            + max(len(r.output_key), math.ceil(max(1, math.ceil(r.output_tokens * shrink)) / live_unit))
            for r in part.requests
        ),
        default=0,
    )
    return longest + 1


def slice_scale(whole: Trace, part: Trace, live_unit: int = 1) -> SliceScale:
    """How the slice scales each pool, as the outputs state it."""
    return SliceScale(
        len(part.requests),
        len(whole.requests),
        reused_units(part),
        reused_units(whole),
        pool_floor(part, live_unit),
    )


def scale_pool(pool: int, whole: Trace, part: Trace, live_unit: int = 1) -> int:
    """The pool (key elements) that keeps the slice's working set in the ratio the trace's has to `pool`."""
    s = slice_scale(whole, part, live_unit)
    scaled = math.ceil(pool * s.reused_slice / s.reused_trace) if s.reused_trace else pool
    return min(pool, max(scaled, s.floor))


def scaled_candidates(
    cands: list[Candidate], whole: Trace, part: Trace, profile: CardProfile, live_unit: int = 1
) -> list[Candidate]:
    """Each candidate at its scaled pool, predicted on the slice."""
    out = []
    for c in cands:
        cfg = dataclasses.replace(c.config, pool=scale_pool(c.config.pool, whole, part, live_unit))
        res = replay(part, cfg, card=profile)
        out.append(Candidate(cfg, res, model(part, res, profile), c.unit_tokens))
    return out
