"""Tokenizers the generator can use: the built-in word tokenizer, a local HF tokenizer, or raw ids.

A local tokenizer loads through transformers when it is installed, else through `tokenizers` alone
from a tokenizer.json (enough for the real-server suite's model).

Each kind gives a `PromptMaker` that produces prompts of an exact token count from a seeded rng.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Sequence
from pathlib import Path

from harness.errors import HarnessError
from harness.paths import expand_path
from harness.tokenizer import VOCAB, WordTokenizer

# token ids used when prompts are sent as ids (tokenizer: server): ordinary tokens of most
# large vocabularies, clear of the byte/special ids at the start
ID_BASE = 1000
ID_SPAN = len(VOCAB)


class HFTokenizer:
    """A model's own tokenizer from a local folder, through transformers (optional extra `tokenizers`)."""

    def __init__(self, path: str) -> None:
        try:
            from transformers import AutoTokenizer  # noqa: PLC0415 - optional extra
        except ImportError as e:
            raise HarnessError(
                f"tokenizer: {path}: transformers does not import ({e}); pip install 'harness[tokenizers]'"
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


def tokenizer_file(path: str | Path) -> Path:
    """`path` itself when it is a file, else `path/tokenizer.json`."""
    p = Path(path).expanduser()
    return p / "tokenizer.json" if p.is_dir() else p


class TokenizerJson:
    """A HF fast tokenizer from its tokenizer.json with the `tokenizers` package alone (extra `real`).

    Same surface as HFTokenizer; no special tokens are added on encode.
    """

    def __init__(self, path: str | Path) -> None:
        f = tokenizer_file(path)
        if not f.is_file():
            raise HarnessError(f"tokenizer: {path}: no tokenizer.json there")
        try:
            from tokenizers import Tokenizer  # noqa: PLC0415 - optional extra `real`
        except ImportError:
            raise HarnessError(
                f"tokenizer: {path}: needs the tokenizers package (pip install 'harness[real]')"
            ) from None
        try:
            self._tok = Tokenizer.from_file(str(f))
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception subclasses
            raise HarnessError(f"tokenizer: {f}: could not load ({type(e).__name__}: {e})") from None
        self.name = str(path)
        special = {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        n = len(self)
        self._ids = [i for i in range(min(n, 50_000)) if i not in special][256:] or list(range(n))

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def random_ids(self, rng: random.Random, n: int) -> list[int]:
        return rng.choices(self._ids, k=n)


LocalTokenizer = HFTokenizer | TokenizerJson


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def load_tokenizer(path: str) -> LocalTokenizer:
    """A local tokenizer: transformers when importable, else `tokenizers` for a tokenizer.json (or a folder with one).

    `{cache}` and a leading `~` in the path are expanded. Raises HarnessError (one line) otherwise.
    """
    p = Path(expand_path(path))
    if not p.exists():
        raise HarnessError(f"tokenizer: {path}: no such file or folder")
    if p.is_dir() and _importable("transformers"):
        return HFTokenizer(str(p))
    if tokenizer_file(p).is_file():
        if _importable("tokenizers"):
            return TokenizerJson(p)
        raise HarnessError(
            f"tokenizer: {path}: loading it needs the tokenizers package (pip install 'harness[real]') "
            "or transformers (pip install 'harness[tokenizers]')"
        )
    if p.is_dir():
        raise HarnessError(
            f"tokenizer: {path}: no tokenizer.json there; a model folder needs transformers "
            "(pip install 'harness[tokenizers]')"
        )
    raise HarnessError(f"tokenizer: {path}: expected a tokenizer.json file or a tokenizer folder")


def safe_words(hf: LocalTokenizer, least: int = 256) -> list[int]:
    """Token ids that are one whole word with its leading space (` word`) and encode back to themselves:
    text made of them splits at the spaces into exactly those tokens, so a block's text round-trips
    through the tokenizer. Fewer than `least` of them (a tokenizer without such words): every id, and
    prompts that do not round-trip show up as prompt_check mismatches."""
    ids = list(getattr(hf, "_ids", None) or range(ID_BASE, ID_BASE + ID_SPAN))
    safe = []
    for i in ids:
        text = hf.decode([i])
        word = text[1:]
        if text[:1] == " " and word.isalpha() and word.isascii() and hf.encode(text) == [i]:
            safe.append(i)
    return safe if len(safe) >= least else ids


class PromptMaker:
    """Exact-length prompt text (or ids) for one tokenizer; `tag` words make seeds disjoint."""

    def __init__(self, tokenizer: str, hf: LocalTokenizer | None = None) -> None:
        self.kind = "word" if tokenizer == "word" else "server" if tokenizer == "server" else "hf"
        self.word = WordTokenizer()
        self.hf = hf

    def make(self, rng: random.Random, n: int, tags: Sequence[int] = ()) -> tuple[str | tuple[int, ...], int]:
        """A prompt of n tokens whose first tokens are the given tags (ids into VOCAB); returns (prompt, n)."""
        tags = list(tags)[:n]
        if self.kind == "word":  # per request on the event loop (harness.workloads.lazy): few steps
            if not tags:
                return " ".join(rng.choices(VOCAB, k=n)), n
            words = [VOCAB[t % len(VOCAB)] for t in tags]
            words += rng.choices(VOCAB, k=n - len(tags))
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
    """`word`, `server`, or a local tokenizer path (see load_tokenizer)."""
    if tokenizer in ("word", "server"):
        return PromptMaker(tokenizer)
    return PromptMaker(tokenizer, load_tokenizer(tokenizer))
