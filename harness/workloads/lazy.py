"""Shared-prefix schedules produced on demand, so memory stays flat from 10k to 1M requests.

Request i of the schedule is computed when asked for, never stored: a seeded keyed permutation (a
Feistel network with cycle walking, O(1) memory) says which (group, prompt) it is, and per-item seeds
give its system prompt and question, so any worker process can produce any slice of the same
schedule. Only two things are remembered while iterating: each group's prompts made so far, one byte a
group up to 255 prompts a group (a shuffled run has nearly every group open at once; nothing with one
prompt per group), and the most recent groups' system prompts, up to a fixed token budget (a shuffled
group's prompts are spread over the whole run: with a cache of a few groups nearly every request re-made
its system prompt, ~10 % of a run's CPU). Each item reseeds one Random per iteration rather than
constructing one: the same state, less work.
"""

from __future__ import annotations

import random
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Protocol

from harness.spec import SharedPrefixWorkload
from harness.workloads.schedule import Conversation, Prompt, Request
from harness.workloads.tokenizers import PromptMaker

# the system prompts kept while iterating: at most this many groups' and this many tokens in all (~1 MB
# of word text, a few MB of ids), whatever the run's length
SYSTEM_CACHE = 8192
SYSTEM_CACHE_TOKENS = 131_072


class QuestionMaker(Protocol):
    """What draws a question: generators.QuestionSource (a protocol, since generators imports this module)."""

    def make(self, rng: random.Random, tags: list[int]) -> tuple[Prompt, int]: ...


class Permutation:
    """A seeded bijection of range(n), computed per index (no table): 4 Feistel rounds, cycle-walked."""

    def __init__(self, n: int, key: int) -> None:
        self.n = n
        bits = max(2, (max(n, 2) - 1).bit_length())
        bits += bits % 2
        self.half, self.mask = bits // 2, (1 << (bits // 2)) - 1
        rng = random.Random(key)
        self.keys = [rng.getrandbits(61) for _ in range(4)]

    def __getitem__(self, i: int) -> int:
        half, mask, x = self.half, self.mask, i
        while True:
            left, right = x >> half, x & mask
            for k in self.keys:
                # tuple hashing of ints is deterministic across processes (no hash randomisation)
                left, right = right, left ^ (hash((right, k)) & mask)
            x = (left << half) | right
            if x < self.n:
                return x


class LazySharedPrefix:
    """The conversations of a shared-prefix schedule, in send order, each made when iterated (re-iterable).

    G groups x P prompts: group g's system prompt and its prompt p's question come from their own
    seeds; `shuffle` orders all G x P by a seeded permutation, else group by group.
    """

    def __init__(
        self,
        wl: SharedPrefixWorkload,
        seed: int,
        maker: PromptMaker,
        qsrc: QuestionMaker,
        tags: Callable[[int, int], list[int]],
    ) -> None:
        self.wl, self.seed, self.maker, self.qsrc, self.tags = wl, seed, maker, qsrc, tags
        self.n = wl.groups * wl.prompts_per_group
        self.perm = (
            Permutation(self.n, random.Random(f"shuffle:{seed}").getrandbits(61)) if wl.shuffle else None
        )
        self._systems: OrderedDict[int, tuple[Prompt, int]] = OrderedDict()
        self._system_tokens = 0  # tokens held in _systems
        self._sys_rng = random.Random()  # reseeded per group (seeding costs less than a new Random)

    def __len__(self) -> int:
        return self.n

    def count_part(self, i: int, n: int) -> int:
        """Requests whose group is i modulo n (a worker's share of a split run), without making any."""
        groups = len(range(i, self.wl.groups, n))
        return groups * self.wl.prompts_per_group

    def __iter__(self) -> Iterator[Conversation]:
        return self.slice(0, self.n)

    def __getitem__(self, i: int) -> Conversation:
        """Conversation i alone (its position counted by a pass over the earlier ones: for tests)."""
        if not 0 <= i < self.n:
            raise IndexError(i)
        for c in self.slice(0, i + 1):
            last = c
        return last

    def for_part(self, i: int, n: int) -> Iterator[Conversation]:
        """Every conversation in order, but only groups i modulo n with prompts: the others are stubs
        (index, group, no text) that a worker of a split run counts and draws arrival times for."""
        return self.slice(0, self.n, lambda g: g % n == i)

    def slice(self, start: int, stop: int, wanted=None) -> Iterator[Conversation]:
        """Conversations start..stop-1; positions count from the schedule's start (earlier ones are replayed
        cheaply, without prompts, when start > 0 and a group has several prompts). wanted(group): False
        makes a stub without prompts."""
        wl, P = self.wl, self.wl.prompts_per_group
        seen = group_counts(wl.groups if P > 1 else 0, P)
        rng = random.Random()  # reseeded per item: the state Random(seed) would have
        base = self.seed * 1_000_003
        for i in range(stop):
            j = self.perm[i] if self.perm is not None else i
            g, p = divmod(j, P)
            pos = 0
            if P > 1:
                pos = seen[g]
                seen[g] = pos + 1
            if i < start:
                continue
            if wanted is not None and not wanted(g):
                stub = Request(i, i, 0, pos, "", 0, wl.output_tokens, group=g)
                yield Conversation(id=i, system="", system_tokens=0, turns=[stub], group=g)
                continue
            if P == 1:  # one prompt per group: its question continues the group's draws (one seeding)
                rng.seed((base + g) * 1_000_003)
                system, sys_n = self.maker.make(rng, wl.system_prompt_tokens, self.tags(self.seed, g))
            else:
                system, sys_n = self._system(g)
                rng.seed((base + g) * 1_000_003 + p + 1)
            q, q_n = self.qsrc.make(rng, self.tags(self.seed, g) + [p] if sys_n == 0 else [])
            req = Request(
                index=i,
                conversation=i,
                turn=0,
                position=pos,
                question=q,
                question_tokens=q_n,
                output_tokens=wl.output_tokens,
                group=g,
            )
            yield Conversation(id=i, system=system, system_tokens=sys_n, turns=[req], group=g)

    def _system(self, g: int) -> tuple[Prompt, int]:
        cache = self._systems
        hit = cache.get(g)
        if hit is not None:
            cache.move_to_end(g)
            return hit
        rng = self._sys_rng
        rng.seed((self.seed * 1_000_003 + g) * 1_000_003)
        made = self.maker.make(rng, self.wl.system_prompt_tokens, self.tags(self.seed, g))
        cache[g] = made
        self._system_tokens += made[1]
        while len(cache) > SYSTEM_CACHE or (self._system_tokens > SYSTEM_CACHE_TOKENS and len(cache) > 1):
            self._system_tokens -= cache.popitem(last=False)[1][1]
        return made


def group_counts(groups: int, most: int) -> array:
    """Prompts sent so far per group, in the narrowest unsigned array that holds `most`: a shuffled run has
    nearly every group open at once, and a dict of them cost ~70 bytes a group (4.5 MB at 62,500 groups)."""
    code = next(c for c in ("B", "H", "I", "Q") if most < 1 << (8 * array(c).itemsize))
    return array(code, bytes(groups * array(code).itemsize))
