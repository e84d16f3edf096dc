"""The traffic `--confirm` sends live: the advised input as an experiment spec, its point and seed.

A spec is sent as written (its first point, seed 0: what `harness.whatif.inputs.read_spec` predicted); a
capture point as its manifest's spec at the point's sweep values and the seed it ran with (what
`harness.whatif.captured.read_capture` rebuilt); a Mooncake trace as a `workload: {kind: trace}` spec over
the same file, one request at a time in file order, each hash id sent as `block_tokens` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.spec import ExperimentSpec, Point, load_spec

TIMEOUTS = {"connect": 10, "first_token": 300, "total": 600}


@dataclass(frozen=True)
class LiveSpec:
    spec: ExperimentSpec
    point: Point
    seed: int
    unit_tokens: int  # tokens sent live per pool unit of the advice (a block trace: block_tokens)


def live_spec(path: Path, work: Path, block_tokens: int, advice_unit: int) -> LiveSpec:
    if path.is_dir():
        return _capture(path)
    if path.suffix in (".yaml", ".yml"):
        spec = load_spec(path)
        return LiveSpec(spec, spec.points()[0], 0, 1)
    return _trace(path, work, block_tokens, advice_unit)


def trace_spec_dict(path: Path, block_tokens: int) -> dict:
    """A trace workload spec over `path`: token ids (exact on SGLang and the sim), sent in file order."""
    return {
        "name": f"advise-{path.stem}",
        "description": f"harness advise --confirm: {path.name} replayed live",
        "api": "sglang-generate",
        "model": "default",
        "tokenizer": "server",
        "concurrency": 1,
        "seeds": [0],
        "workload": {
            "kind": "trace",
            "path": str(path.resolve()),
            "format": "mooncake",
            "block_tokens": block_tokens,
            "timestamps": "ignore",
        },
        "timeouts": TIMEOUTS,
    }


def _trace(path: Path, work: Path, block_tokens: int, advice_unit: int) -> LiveSpec:
    work.mkdir(parents=True, exist_ok=True)
    out = work / "live-spec.yaml"
    out.write_text(yaml.safe_dump(trace_spec_dict(path, block_tokens), sort_keys=False))
    spec = load_spec(out)
    return LiveSpec(spec, spec.points()[0], 0, block_tokens)


def _capture(point_dir: Path) -> LiveSpec:
    from harness.capture import REQUESTS, read_jsonl
    from harness.whatif.captured import captured_point

    spec, point = captured_point(point_dir)
    rows, _bad = read_jsonl(point_dir / REQUESTS)
    seed = int(next((r.get("seed") for r in rows if r.get("seed") is not None), 0) or 0)
    return LiveSpec(spec, point, seed, 1)
