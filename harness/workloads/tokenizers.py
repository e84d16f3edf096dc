"""Tokenizers the generator can use: the built-in word tokenizer, a local HF tokenizer, or raw ids.

Each kind gives a `PromptMaker` that produces prompts of an exact token count from a seeded rng.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from harness.errors import HarnessError
from harness.tokenizer import VOCAB, WordTokenizer

# token ids used when prompts are sent as ids (tokenizer: server): ordinary tokens of most
# large vocabularies, clear of the byte/special ids at the start
ID_BASE = 1000
ID_SPAN = len(VOCAB)


class HFTokenizer:
    """A model's own tokenizer from a local folder (transformers, optional extra)."""

    def __init__(self, path: str) -> None:
        if not Path(path).exists():
            raise HarnessError(f"tokenizer: {path}: no such file or folder")
        try:
            from transformers import AutoTokenizer  # noqa: PLC0415 - optional extra
        except ImportError:
            raise HarnessError(
                f"tokenizer: {path}: needs the transformers package (pip install 'harness[tokenizers]')"
            ) from None
        try:
            self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as e:  # noqa: BLE001 - any load failure is a bad path
            raise HarnessError(f"tokenizer: {path}: could not load ({type(e).__name__}: {e})") from None
        self.name = str(path)
        special = set(getattr(self._tok, "all_special_ids", []) or [])
        n = len(self._tok)
        self._ids = [i for i in range(min(n, 50_000)) if i not in special][256:] or list(range(n))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def random_ids(self, rng: random.Random, n: int) -> list[int]:
        return rng.choices(self._ids, k=n)


class PromptMaker:
    """Exact-length prompt text (or ids) for one tokenizer; `tag` words make seeds disjoint."""

    def __init__(self, tokenizer: str, hf: HFTokenizer | None = None) -> None:
        self.kind = "word" if tokenizer == "word" else "server" if tokenizer == "server" else "hf"
        self.word = WordTokenizer()
        self.hf = hf

    def make(self, rng: random.Random, n: int, tags: Sequence[int] = ()) -> tuple[str | tuple[int, ...], int]:
        """A prompt of n tokens whose first tokens are the given tags (ids into VOCAB); returns (prompt, n)."""
        tags = list(tags)[:n]
        if self.kind == "word":
            words = [VOCAB[t % len(VOCAB)] for t in tags] + list(rng.choices(VOCAB, k=n - len(tags)))
            return " ".join(words), n
        if self.kind == "server":
            ids = [ID_BASE + t % ID_SPAN for t in tags] + [
                ID_BASE + rng.randrange(ID_SPAN) for _ in range(n - len(tags))
            ]
            return tuple(ids), n
        assert self.hf is not None
        head = " ".join(VOCAB[t % len(VOCAB)] for t in tags)
        return self._exact_hf(rng, n, head)

    def count(self, text: str) -> int:
        """Token count of user-supplied text (ShareGPT turns), computed before the run."""
        if self.kind == "word":
            return len(text.split())
        assert self.hf is not None
        return len(self.hf.encode(text))

    def _exact_hf(self, rng: random.Random, n: int, head: str) -> tuple[str, int]:
        hf = self.hf
        assert hf is not None
        if n == 0:
            return "", 0
        ids = hf.encode(head)[:n] if head else []
        ids += hf.random_ids(rng, n - len(ids))
        text = hf.decode(ids)
        for _ in range(8):  # decode/encode is not a bijection: trim or pad until it is exact
            got = hf.encode(text)
            if len(got) == n:
                return text, n
            # too long: cut to n tokens; too short: pad with more random tokens
            text = hf.decode(got[:n]) if len(got) > n else text + hf.decode(hf.random_ids(rng, n - len(got)))
        return text, len(hf.encode(text))


def load_prompt_maker(tokenizer: str) -> PromptMaker:
    """`word`, `server`, or a local tokenizer path (clear error when transformers or the path is missing)."""
    if tokenizer in ("word", "server"):
        return PromptMaker(tokenizer)
    return PromptMaker(tokenizer, HFTokenizer(tokenizer))
