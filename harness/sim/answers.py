"""The sim's answers: deterministic token ids seeded by the prompt, so a replay knows them in advance.

The live server and `harness whatif` both take answers from here (what-if never imports the HTTP
server): the same prompt and `--random-seed` give the same answer, so a multi-turn history resent by
the client is exactly what the sim generated.
"""

from __future__ import annotations

import random
import zlib
from array import array

from harness.tokenizer import THINK_END, THINK_START, VOCAB, word_id

THINK_IDS = {word_id(THINK_START): THINK_START, word_id(THINK_END): THINK_END}


def answer_ids(prompt_ids: list[int], n: int, seed: int) -> list[int]:
    """n deterministic vocabulary word ids, seeded by the prompt: the same prompt gets the same answer."""
    h = zlib.crc32(array("q", prompt_ids).tobytes()) if prompt_ids else 0
    rng = random.Random((seed << 32) ^ h)
    return [rng.randrange(len(VOCAB)) for _ in range(n)]


def reasoning_answer_ids(prompt_ids: list[int], n: int, seed: int, reasoning: int) -> list[int]:
    """The first n tokens of `<think>` + `reasoning` words + `</think>` + the answer proper, seeded by the
    prompt; with reasoning 0 exactly `answer_ids` (no span)."""
    if reasoning <= 0:
        return answer_ids(prompt_ids, n, seed)
    words = answer_ids(prompt_ids, reasoning + max(n - reasoning - 2, 0), seed)
    start, end = word_id(THINK_START), word_id(THINK_END)
    return ([start, *words[:reasoning], end, *words[reasoning:]])[:n]


def natural_length(prompt_ids: list[int], seed: int) -> int:
    """The length the sim 'wants' to answer when EOS is not ignored: 16..256 tokens, seeded."""
    h = zlib.crc32(array("q", prompt_ids[-64:]).tobytes()) if prompt_ids else 0
    return 16 + random.Random(h ^ (seed + 7919)).randrange(241)


def plan_answer(
    prompt_ids: list[int], cap: int, *, ignore_eos: bool, seed: int, answer_len: int | None, reasoning: int
) -> tuple[list[int], str]:
    """The whole answer and its finish reason: `cap` tokens ("length") when EOS is ignored or the natural
    length (plus the reasoning span) reaches the cap, else the natural length ("stop")."""
    if ignore_eos:
        n, reason = cap, "length"
    else:  # a reasoning model thinks first, then answers at its natural length
        want = answer_len or natural_length(prompt_ids, seed)
        want += reasoning + 2 if reasoning > 0 else 0
        n, reason = (cap, "length") if want >= cap else (want, "stop")
    return reasoning_answer_ids(prompt_ids, n, seed, reasoning), reason
