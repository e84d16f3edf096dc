"""Paths written in specs: `{cache}` (the harness's build cache) and a leading `~`, which no shell expands for us.

`{cache}` is $HARNESS_CACHE when set, else ~/.cache/harness: where llama-server, the tiny model and the
SGLang oracle venv are built, so a spec can name them on any machine.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_PLACEHOLDER = "{cache}"


def cache_root() -> Path:
    """$HARNESS_CACHE, else ~/.cache/harness: the folder shared by everything the harness builds."""
    env = os.environ.get("HARNESS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "harness"


def fill_cache(text: str) -> str:
    """Every `{cache}` in text → the cache root."""
    return text.replace(CACHE_PLACEHOLDER, str(cache_root())) if CACHE_PLACEHOLDER in text else text


def expand_path(text: str) -> str:
    """`{cache}` filled, then a leading `~` / `~user` expanded (os.path.expanduser)."""
    return os.path.expanduser(fill_cache(text))
