"""Deterministic schedules from a seed: shared-prefix groups and multi-turn sessions.

Seed tags: the first two tokens of every prompt encode the seed, so two seeds never share a prefix
(and seed 2 never hits seed 1's cache); the third encodes the group/session.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from harness.errors import SpecError
from harness.spec import LogNormal, MultiTurnWorkload, SharedPrefixWorkload, ShareGPT
from harness.tokenizer import VOCAB
from harness.workloads.lazy import LazySharedPrefix
from harness.workloads.schedule import Prompt, Schedule
from harness.workloads.spilled_sessions import PromptStore, SpilledSessions
from harness.workloads.tokenizers import PromptMaker

V = len(VOCAB)


def seed_tags(seed: int, unit: int) -> list[int]:
    return [seed % V, (seed // V) % V, unit % V]


class QuestionSource:
    """Question prompts of a fixed, lognormal or ShareGPT-drawn length."""

    def __init__(
        self, spec_len: int | LogNormal | ShareGPT, maker: PromptMaker, spec_file: str, key: str
    ) -> None:
        self.spec_len, self.maker = spec_len, maker
        self.turns: list[str] = []
        if isinstance(spec_len, ShareGPT):
            if maker.kind == "server":
                raise SpecError(
                    spec_file, key, "sharegpt turns are text; they cannot be sent with tokenizer: server"
                )
            self.turns = _sharegpt_turns(spec_len.path, spec_file, key)

    def make(self, rng: random.Random, tags: list[int]) -> tuple[Prompt, int]:
        s = self.spec_len
        if isinstance(s, ShareGPT):
            text = rng.choice(self.turns)
            return text, self.maker.count(text)
        if isinstance(s, LogNormal):
            mu = math.log(s.mean) - s.sigma**2 / 2
            n = max(s.min, round(rng.lognormvariate(mu, s.sigma)))
            if s.max is not None:
                n = min(n, s.max)
            return self.maker.make(rng, n, tags)
        return self.maker.make(rng, int(s), tags)


def _sharegpt_turns(path: Path, spec_file: str, key: str) -> list[str]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpecError(spec_file, f"{key}.sharegpt", f"{path}: not a readable JSON file ({e})") from None
    turns: list[str] = []
    if isinstance(data, list):
        for item in data:
            conv = item.get("conversations") if isinstance(item, dict) else None
            for m in conv or []:
                v = m.get("value") if isinstance(m, dict) else None
                if isinstance(v, str) and v.strip() and m.get("from") in ("human", "user"):
                    turns.append(v)
    if not turns:
        raise SpecError(
            spec_file, f"{key}.sharegpt", f"{path}: no human turns found (expected ShareGPT format)"
        )
    return turns


def shared_prefix(wl: SharedPrefixWorkload, seed: int, maker: PromptMaker, spec_file: str) -> Schedule:
    """G groups x P prompts: a group's system prompt + a distinct question, shuffled over all groups.

    Produced lazily (harness.workloads.lazy): nothing of a request exists before it is iterated.
    """
    qsrc = QuestionSource(wl.question_tokens, maker, spec_file, "workload.question_tokens")
    convs = LazySharedPrefix(wl, seed, maker, qsrc, seed_tags)
    return Schedule(
        kind=wl.kind,
        seed=seed,
        tokenizer=maker.kind,
        conversations=convs,
        ids=maker.kind == "server",
        total=len(convs),
    )


def multi_turn(wl: MultiTurnWorkload, seed: int, maker: PromptMaker, spec_file: str) -> Schedule:
    """N sessions x T turns, round-robin: every session's turn t before any session's turn t+1.

    Every system prompt, then every question in request order (t x N + s), from one seeded stream,
    each written to a spill file as it is drawn (harness.workloads.spilled_sessions): nothing per
    request stays in memory.
    """
    rng = random.Random(f"multi-turn:{seed}")
    qsrc = QuestionSource(wl.question_tokens, maker, spec_file, "workload.question_tokens")
    store = PromptStore(ids=maker.kind == "server")
    # sessions whose system prompt is empty: their first question is tagged
    no_system = bytearray(wl.sessions)
    for s in range(wl.sessions):
        system, sys_n = maker.make(rng, wl.system_prompt_tokens, seed_tags(seed, s))
        store.add(system, sys_n)
        no_system[s] = sys_n == 0
    for t in range(wl.turns):
        for s in range(wl.sessions):
            q, q_n = qsrc.make(rng, seed_tags(seed, s) + [t] if no_system[s] and t == 0 else [])
            store.add(q, q_n)
    store.spill.flush()
    return Schedule(
        kind=wl.kind,
        seed=seed,
        tokenizer=maker.kind,
        conversations=SpilledSessions(wl.sessions, wl.turns, wl.answer_tokens, store),
        history=wl.history,
        ids=maker.kind == "server",
    )
