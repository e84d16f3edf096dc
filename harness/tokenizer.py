"""The built-in word tokenizer and chat template, shared by the workload generator and the sim.

One whitespace-separated word is one token, so prompt lengths are exact without any model files.
Words from the fixed vocabulary map to ids 0..V-1; any other word maps to a stable hashed id >= V.
"""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Sequence
from typing import Protocol

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def _build_vocab() -> tuple[str, ...]:
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]  # 70
    return tuple(a + b for a, b in itertools.product(syllables, syllables))  # 4,900 two-syllable words


VOCAB: tuple[str, ...] = _build_vocab()
_INDEX = {w: i for i, w in enumerate(VOCAB)}
HASHED_BASE = 1 << 20

# ChatML-like template of the sim (documented in docs/sim.md): each message renders as
# "<|im_start|>ROLE CONTENT <|im_end|>" and the generation prompt as "<|im_start|>assistant".
# With the word tokenizer a message therefore costs len(content) + 2 tokens, the prompt + 1.
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


class Tokenizer(Protocol):
    """What the workload generator needs from a tokenizer: exact counts and round-trips."""

    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class WordTokenizer:
    """One word of a fixed vocabulary = one token; deterministic and dependency-free."""

    name = "word"
    vocab_size = len(VOCAB)

    def encode(self, text: str) -> list[int]:
        return [word_id(w) for w in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(VOCAB[i] if 0 <= i < len(VOCAB) else f"<{i}>" for i in ids)

    def random_words(self, rng: random.Random, n: int) -> str:
        """n random vocabulary words: exactly n tokens."""
        return " ".join(rng.choices(VOCAB, k=n))


def word_id(word: str) -> int:
    i = _INDEX.get(word)
    if i is not None:
        return i
    return HASHED_BASE + (zlib.crc32(word.encode()) & 0x3FFFFFFF)


def render_chat(messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """The sim's fixed chat template; also used to send chat histories to completion endpoints."""
    parts = [f"{IM_START}{m['role']} {_content_text(m.get('content'))} {IM_END}" for m in messages]
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant")
    return " ".join(parts)


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


THINK_START = "<think>"
THINK_END = "</think>"


def strip_reasoning(text: str) -> str:
    """What Qwen3's chat template keeps of an earlier answer: the text after its LAST `</think>`, leading
    newlines dropped (`content.split('</think>')[-1].lstrip('\\n')`); text without one is kept whole.

    The one rule for both sides: the sim's template (`drop_reasoning`) and the client building a
    drop-reasoning history (`workloads.prompts`), so the history a client sends renders as the server
    would render the full answer.
    """
    return text.rsplit(THINK_END, 1)[1].lstrip("\n") if THINK_END in text else text


def drop_reasoning(messages: Sequence[dict]) -> list[dict]:
    """A Qwen3-style template's history rewrite: assistant messages before the last user message keep only
    what `strip_reasoning` keeps; a trailing assistant turn (being generated) keeps its span."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    out: list[dict] = []
    for i, m in enumerate(messages):
        text = _content_text(m.get("content"))
        if i < last_user and m.get("role") == "assistant" and THINK_END in text:
            m = {**m, "content": strip_reasoning(text)}
        out.append(m)
    return out
