"""Load a trained `tokenizer.json` with the `tokenizers` package alone (transformers is an optional extra).

Same surface as harness.workloads.tokenizers.HFTokenizer (name, encode, decode, random_ids), so the
prompt maker can use it when transformers is absent.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from harness.errors import HarnessError


def tokenizer_file(path: str | Path) -> Path:
    """`path` itself when it is a file, else `path/tokenizer.json`."""
    p = Path(path).expanduser()
    return p / "tokenizer.json" if p.is_dir() else p


class TokenizerJson:
    """A HF fast tokenizer from its tokenizer.json; no special tokens added on encode."""

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
        special = {i for i, _ in self._special_items()}
        n = self._tok.get_vocab_size(with_added_tokens=True)
        self._ids = [i for i in range(min(n, 50_000)) if i not in special][256:] or list(range(n))

    def _special_items(self) -> list[tuple[int, object]]:
        decoder = self._tok.get_added_tokens_decoder()
        return [(i, t) for i, t in decoder.items() if getattr(t, "special", False)]

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def random_ids(self, rng: random.Random, n: int) -> list[int]:
        return rng.choices(self._ids, k=n)
