"""The traffic `--confirm` sends live: the advised input as an experiment spec, its point and seed.

A spec is sent as written (its first point, seed 0: what `harness.whatif.inputs.read_spec` predicted); a
capture point as its manifest's spec at the point's sweep values and the seed it ran with (what
`harness.whatif.captured.read_capture` rebuilt); a Mooncake trace as a `workload: {kind: trace}` spec, one
request at a time in file order, each hash id sent as `block_tokens` tokens (live_block: the trace's own
block on SGLang on a GPU, 16 where a CPU server or the sim takes it). A trace shrunk that way is sent with
its answers shrunk alike (a copy of the file, `output_length` scaled), so an answer keeps its share of the
pool.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.engines.confirm import CONFIRM_TARGETS, ConfirmTarget
from harness.errors import HarnessError
from harness.spec import ExperimentSpec, Point, load_spec

TIMEOUTS = {"connect": 10, "first_token": 300, "total": 600}
SHRUNK_BLOCK = 16  # tokens a hash id where the server's pool is a CPU's (or the sim's): ConfirmTarget.shrunk


@dataclass(frozen=True)
class LiveBlock:
    """Tokens a hash id is sent as, and why that many (the outputs say both)."""

    tokens: int
    trace_block: int  # the trace's own block (--block-size, 512 for Mooncake)
    reason: str

    @property
    def shrunk(self) -> bool:
        return self.tokens < self.trace_block


def live_block(server_kind: str, trace_block: int, asked: int | None) -> LiveBlock:
    """The trace's block on SGLang on a GPU; 16 on the sim and the CPU servers (SGLang's, other engines'), whose pools
    live in host memory (and whose CPU time grows with every id sent); `--live-block-tokens` wins."""
    if asked is not None:
        return LiveBlock(asked, trace_block, "--live-block-tokens")
    target = CONFIRM_TARGETS.get(server_kind) or ConfirmTarget(server_kind)  # harness.engines.confirm
    if not target.shrunk:
        return LiveBlock(trace_block, trace_block, f"the trace's own block: {target.why_block}")
    why = f"{target.title or target.kind}: {target.why_block}"
    return LiveBlock(SHRUNK_BLOCK, trace_block, f"shrunk from {trace_block}: {why}")


@dataclass(frozen=True)
class LiveSpec:
    spec: ExperimentSpec
    point: Point
    seed: int
    unit_tokens: int  # tokens sent live per pool unit of the advice (a block trace: block_tokens)


def live_spec(path: Path, work: Path, block_tokens: int, advice_unit: int, load: Any = None) -> LiveSpec:
    """`load` (harness.advise.load.Load): a trace is sent at it (harness.advise.confirm_load); None: one
    request at a time."""
    if path.is_dir():
        return _capture(path)
    if path.suffix in (".yaml", ".yml"):
        spec = load_spec(path)
        return LiveSpec(spec, spec.points()[0], 0, 1)
    return _trace(path, work, block_tokens, advice_unit, load)


def trace_spec_dict(path: Path, block_tokens: int, stem: str | None = None, load: Any = None) -> dict:
    """A trace workload spec over `path`: token ids (exact on SGLang and the sim), sent in file order, one
    at a time or at `load` (harness.advise.load.Load); `stem`: the name of the trace it was made from (a
    shrunk copy keeps the original's)."""
    stem = stem or path.stem
    out: dict[str, Any] = {
        "name": f"advise-{stem}",
        "description": f"harness advise --confirm: {stem} replayed live",
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
    if load is not None:
        from harness.advise.confirm_load import spec_load

        with path.open() as f:
            n = sum(1 for line in f if line.strip())
        top, wl = spec_load(load, n)
        out |= top
        out["workload"] |= wl
    return out


def shrunk_answers(path: Path, work: Path, block_tokens: int, trace_block: int) -> Path:
    """A copy of the trace whose `output_length` is scaled as its prompts are (block_tokens / trace_block,
    at least 1 token): unscaled, a shrunk prompt's answer of the trace's own length fills the pool."""
    out = work / f"{path.stem}-answers-{block_tokens}of{trace_block}.jsonl"
    with path.open() as src, out.open("w") as dst:
        for no, line in enumerate(src, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            n = obj.get("output_length")
            if isinstance(n, int) and not isinstance(n, bool):
                obj["output_length"] = max(1, math.ceil(n * block_tokens / trace_block))
            elif n is not None:
                raise HarnessError(f"{path}:{no}: output_length: expected an integer, got {n!r:.40}")
            dst.write(json.dumps(obj) + "\n")
    return out


def _trace(path: Path, work: Path, block_tokens: int, advice_unit: int, load: Any = None) -> LiveSpec:
    work.mkdir(parents=True, exist_ok=True)
    sent = shrunk_answers(path, work, block_tokens, advice_unit) if block_tokens < advice_unit else path
    out = work / "live-spec.yaml"
    out.write_text(yaml.safe_dump(trace_spec_dict(sent, block_tokens, path.stem, load), sort_keys=False))
    spec = load_spec(out)
    return LiveSpec(spec, spec.points()[0], 0, block_tokens)


def _capture(point_dir: Path) -> LiveSpec:
    from harness.capture import REQUESTS, read_jsonl
    from harness.whatif.captured import captured_point

    spec, point = captured_point(point_dir)
    rows, _bad = read_jsonl(point_dir / REQUESTS)
    seed = int(next((r.get("seed") for r in rows if r.get("seed") is not None), 0) or 0)
    return LiveSpec(spec, point, seed, 1)
