"""Prompts of replayed traces, built at send time from what the file holds (hash ids, messages, text, ids).

A Mooncake hash id becomes one block of exactly `block_tokens` tokens: the same id always gives the same
tokens, and different ids differ from their first token, so two requests share a cached prefix exactly
where their hash ids do. The head token encodes the id: with the word tokenizer a word outside the
vocabulary (`h<id>`, its own token id); as token ids `ID_BASE + id mod HEAD_SPAN` followed by
`id // HEAD_SPAN`, so ids closer than HEAD_SPAN differ at the first token and any two at the second.
The rest of a block is drawn from a generator seeded by the id; blocks are cached (bounded) because
the same ids recur across requests.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

import numpy as np  # its PCG64 draws make the blocks (their sha1s are pinned): only a trace imports this module

from harness.tokenizer import VOCAB, render_chat
from harness.workloads.schedule import BuiltPrompt
from harness.workloads.tokenizers import ID_BASE, ID_SPAN, LocalTokenizer, safe_words

HEAD_SPAN = 30_000  # head ids ID_BASE .. ID_BASE + 29,999: inside any vocabulary of 31k tokens or more
BLOCK_CACHE = 4096  # blocks kept; a block of 512 ids is ~4 KiB as an array


def _sha(payload: Any) -> str:
    if isinstance(payload, str):
        return hashlib.sha1(payload.encode()).hexdigest()
    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        return hashlib.sha1(render_chat(payload).encode()).hexdigest()
    return hashlib.sha1(array("q", payload).tobytes()).hexdigest()


class BlockMaker:
    """Block tokens for one run: `word` (text of vocabulary words), `server` (token ids) or a local HF tokenizer."""

    def __init__(self, kind: str, block_tokens: int, hf: LocalTokenizer | None = None) -> None:
        self.kind, self.block_tokens, self.hf = kind, block_tokens, hf
        self._cache: OrderedDict[int, Any] = OrderedDict()
        if hf is not None:
            self._vocab = np.asarray(safe_words(hf))

    def block(self, h: int) -> Any:
        """The whole block of hash id h: a list of words (word) or an int array (ids, HF)."""
        got = self._cache.get(h)
        if got is not None:
            self._cache.move_to_end(h)
            return got
        n = self.block_tokens
        rng = np.random.default_rng(h & 0xFFFFFFFFFFFFFFFF)
        if self.kind == "word":
            body = rng.integers(0, len(VOCAB), n - 1)
            got = [f"h{h}"] + [VOCAB[i] for i in body]
        elif self.kind == "server":
            body = ID_BASE + rng.integers(0, ID_SPAN, n)
            body[0] = ID_BASE + h % HEAD_SPAN
            if n > 1:
                body[1] = ID_BASE + (h // HEAD_SPAN) % ID_SPAN
            got = body
        else:
            v = self._vocab
            body = v[rng.integers(0, len(v), n)]
            body[0] = v[h % len(v)]
            got = body
        self._cache[h] = got
        if len(self._cache) > BLOCK_CACHE:
            self._cache.popitem(last=False)
        return got

    def prompt(self, hash_ids: tuple[int, ...], tokens: int) -> str | list[int]:
        """The request's blocks, the last cut so that the prompt has exactly `tokens` tokens."""
        bt = self.block_tokens
        parts = []
        for k, h in enumerate(hash_ids):
            b = self.block(h)
            parts.append(b if (k + 1) * bt <= tokens else b[: tokens - k * bt])
        if self.kind == "word":
            return " ".join(w for p in parts for w in p)
        ids = np.concatenate(parts).tolist() if parts else []
        if self.kind == "server":
            return ids
        assert self.hf is not None
        return self.hf.decode(ids)


@dataclass(frozen=True)
class BlockPrompt:
    """A Mooncake request: its hash ids and prompt length; the tokens are made when it is sent."""

    hash_ids: tuple[int, ...]
    tokens: int
    maker: BlockMaker

    def render(self, api: str) -> BuiltPrompt:
        payload = self.maker.prompt(self.hash_ids, self.tokens)
        return _as_api(payload, self.tokens, self.maker.kind == "word", api, counted=True)


@dataclass(frozen=True)
class LoggedPrompt:
    """One request of a `requests` log, as logged: chat messages, prompt text or token ids."""

    payload: str | tuple[dict, ...] | tuple[int, ...]
    tokens: int | None  # content tokens when known (word tokenizer, ids); None otherwise
    word: bool

    def render(self, api: str) -> BuiltPrompt:
        p = self.payload
        if isinstance(p, tuple) and p and isinstance(p[0], dict):
            messages = [dict(m) for m in p]
            expected = self.tokens + 2 * len(messages) + 1 if self.word and self.tokens is not None else None
            payload: Any = messages if api == "openai-chat" else render_chat(messages)
            return BuiltPrompt(payload, expected, _sha(render_chat(messages)))
        if isinstance(p, tuple):  # not messages (checked above): token ids
            return _as_api(list(cast("tuple[int, ...]", p)), self.tokens, self.word, api)
        return _as_api(p, self.tokens, self.word, api)


def _as_api(
    payload: str | list[int], tokens: int | None, word: bool, api: str, counted: bool = False
) -> BuiltPrompt:
    """Token ids as they are; text raw to completions/generate, one user message to chat.

    Expected prompt tokens: known for ids, for word text, and for text built from a tokenizer's own
    tokens (`counted`, a trace's blocks) sent raw; a chat template's own tokens only for the word one."""
    sha = _sha(payload)
    if isinstance(payload, str) and api == "openai-chat":
        # the chat template adds `<|im_start|>user ... <|im_end|>` and the generation prompt: 3 words
        expected = tokens + 3 if word and tokens else None
        return BuiltPrompt([{"role": "user", "content": payload}], expected, sha)
    known = word or counted or not isinstance(payload, str)
    return BuiltPrompt(payload, tokens if known else None, sha)
