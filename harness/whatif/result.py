"""A replay's figures: the Result every replay returns and the Tally that adds them up per request, shared
by the one-instance replay (harness.whatif.replay) and the routing replay (harness.whatif.fleet)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.whatif.grid import Config
from harness.whatif.inputs import Trace, TraceRequest


@dataclass
class Result:
    config: Config
    requests: int
    prompt_tokens: int
    hit_tokens: int
    device_hit_tokens: int
    host_hit_tokens: int
    ideal_hit_tokens: int
    evicted_tokens: int
    load_back_tokens: int
    load_backs: int
    seconds: float
    per_turn: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # turn -> (hit, ideal, prompt)
    ttft_ms: dict[str, float] = field(default_factory=dict)
    # session position (times the session's / group's prefix was sent before) -> (hit, ideal, prompt)
    per_position: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    replay: str = "sequential"  # sequential | engine (the sim's scheduler at the input's concurrency)
    concurrency: int = 1
    cached_per_request: list[int] = field(default_factory=list, repr=False)  # in the trace's order
    storage_hit_tokens: int = 0  # L3 hits (engine replays with a storage backend)
    host_written_tokens: int = 0  # tokens copied device -> host (under write_back: at eviction)
    # seconds the hits' copies cost on the card, summed over requests (harness.sim.tier_time; not overlapped)
    tier_seconds: dict[str, float] = field(default_factory=dict)
    # per priority class (a spec's or capture's `priorities:`): (hit, ideal, prompt) and TTFT percentiles
    per_class: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    ttft_ms_by_class: dict[str, dict[str, float]] = field(default_factory=dict)
    # an L3 engine replay on one server whose prefetches never reached the threshold: the largest store
    # (pages) on which any backend replays the very same (StorageTier.backend_free); None otherwise
    backend_free_pages: float | None = field(default=None, repr=False)
    # conversation -> (hit, ideal, prompt): the token-weighted per-conversation distributions (JSON)
    per_conversation: dict[int, tuple[int, int, int]] = field(default_factory=dict, repr=False)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def ideal_rate(self) -> float:
        return self.ideal_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["config"]["policy_config"] = dict(self.config.policy_config)
        d["hit_rate"] = round(self.hit_rate, 6)
        d["ideal_hit_rate"] = round(self.ideal_rate, 6)
        d["per_turn"] = _rates(self.per_turn)
        d["per_position"] = _rates(self.per_position)
        d["per_class"] = _rates(self.per_class)
        del d["cached_per_request"]
        del d["backend_free_pages"]
        del d["per_conversation"]
        d["per_conversation_hit_rate"] = conversation_rates(self.per_conversation)
        return d


def conversation_rates(table: Mapping[int, tuple[int, int, int]]) -> dict[str, Any] | None:
    """{p10, p50, p90, conversations} of the conversations' own hit rates (token-weighted), with the
    unbounded cache's under `ideal`; None without conversations (harness.whatif.per_conversation)."""
    from harness.whatif.per_conversation import per_conversation_hit_rate

    got = per_conversation_hit_rate((k, h, p) for k, (h, _, p) in table.items())
    ideal = per_conversation_hit_rate((k, i, p) for k, (_, i, p) in table.items())
    return None if got is None else {**got, "ideal": ideal}


def _rates(table: Mapping[Any, tuple[int, int, int]]) -> dict[str, dict[str, float | int]]:
    """(hit, ideal, prompt) tokens per turn or position → rates, for JSON."""
    return {
        str(k): {
            "hit_rate": h / p if p else 0.0,
            "ideal_hit_rate": i / p if p else 0.0,
            "prompt_tokens": p,
        }
        for k, (h, i, p) in sorted(table.items())
    }


class Tally:
    """Hit (device, host), ideal and prompt tokens over the trace, per turn and per session position."""

    def __init__(self) -> None:
        self.device = self.host = self.storage = self.ideal = self.prompt = 0
        self.cached: list[int] = []  # per request, in the trace's order
        self.turn: dict[int, list[int]] = {}
        self.position: dict[int, list[int]] = {}
        self.cls: dict[str, list[int]] = {}
        self.cls_ttft: dict[str, list[float]] = {}
        self.conv: dict[int, list[int]] = {}

    def add(self, r: TraceRequest, device: int, host: int, ideal: int, storage: int = 0) -> None:
        hit = device + host + storage
        self.device += device
        self.host += host
        self.storage += storage
        self.ideal += ideal
        self.prompt += r.tokens
        self.cached.append(hit)
        for table, k in ((self.turn, r.turn), (self.position, r.position), (self.conv, r.conversation)):
            if k is not None:
                acc = table.setdefault(k, [0, 0, 0])
                acc[0] += hit
                acc[1] += ideal
                acc[2] += r.tokens
        if r.priority_class is not None:
            acc = self.cls.setdefault(r.priority_class, [0, 0, 0])
            acc[0] += hit
            acc[1] += ideal
            acc[2] += r.tokens

    def ttft(self, r: TraceRequest, seconds: float) -> None:
        """One request's modelled TTFT, kept per class."""
        if r.priority_class is not None:
            self.cls_ttft.setdefault(r.priority_class, []).append(seconds)

    def result(
        self,
        cfg: Config,
        trace: Trace,
        evicted: tuple[int, int, int],
        seconds: float,
        ttft: list[float],
        **kw,
    ) -> Result:
        """The Result; `evicted` is (evicted tokens, load-back tokens, load-back calls) of the tree."""

        def frozen(table: dict[Any, list[int]]) -> dict[Any, tuple[int, int, int]]:
            return {k: (a, b, c) for k, (a, b, c) in table.items()}

        return Result(
            config=cfg,
            requests=len(trace.requests),
            prompt_tokens=self.prompt,
            hit_tokens=self.device + self.host + self.storage,
            device_hit_tokens=self.device,
            host_hit_tokens=self.host,
            storage_hit_tokens=self.storage,
            ideal_hit_tokens=self.ideal,
            evicted_tokens=evicted[0],
            load_back_tokens=evicted[1],
            load_backs=evicted[2],
            seconds=seconds,
            per_turn=frozen(self.turn),
            ttft_ms=percentiles(ttft),
            per_position=frozen(self.position),
            cached_per_request=self.cached,
            per_class=frozen(self.cls),
            ttft_ms_by_class={k: percentiles(v) for k, v in sorted(self.cls_ttft.items())},
            per_conversation=frozen(self.conv),
            **kw,
        )


def percentiles(ttft: list[float]) -> dict[str, float]:
    import numpy as np

    q = np.percentile(np.asarray(ttft), [50, 90, 99]) * 1000 if ttft else [0.0, 0.0, 0.0]
    return {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}
