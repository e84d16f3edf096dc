"""Load the llama-real specs with their paths pointed at this machine's cache (binary, model, tokenizer).

The YAML files name the default locations under `~/.cache/harness`; here they move to $HARNESS_CACHE
when that is set, and `~` is expanded in the server command, which no shell will do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.errors import SpecError
from harness.realserver.prepare import cache_root
from harness.spec import ExperimentSpec, parse_spec

DEFAULT_ROOT = "~/.cache/harness"


def localize(text: str, root: Path | None = None) -> str:
    """`~/.cache/harness/...` → the cache root in use; any other leading `~` → the home folder."""
    root = root or cache_root()
    if text.startswith(DEFAULT_ROOT + "/") or text == DEFAULT_ROOT:
        return str(root) + text[len(DEFAULT_ROOT) :]
    return str(Path(text).expanduser()) if text.startswith("~") else text


def _walk(obj: Any, root: Path) -> Any:
    if isinstance(obj, str):
        return localize(obj, root)
    if isinstance(obj, list):
        return [_walk(v, root) for v in obj]
    if isinstance(obj, dict):
        return {k: _walk(v, root) for k, v in obj.items()}
    return obj


def load_real_spec(path: str | Path, root: Path | None = None) -> ExperimentSpec:
    """Like harness.spec.load_spec, after localizing the cache paths in `tokenizer` and `servers`."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(str(p), "", f"cannot read ({type(e).__name__}: {e})") from None
    if not isinstance(raw, dict):
        raise SpecError(str(p), "", "expected a mapping at the top level")
    root = root or cache_root()
    for key in ("tokenizer", "servers"):
        if key in raw:
            raw[key] = _walk(raw[key], root)
    return parse_spec(raw, str(p), base_dir=p.parent)
