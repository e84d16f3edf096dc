"""Keep API keys and tokens out of everything we write: captures, manifests, logs, reports.

A secret is any value under a secret-looking key (api_key, token, authorization, ...), the value after
a secret-looking flag (`--api-key K`), or the value of a secret-looking environment variable.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.spec import ExperimentSpec

REDACTED = "<redacted>"
# whole words only: `HF_TOKEN`, `x-api-key`, `Authorization` — never `max_tokens` or `tokenizer`
_SECRET_NAME = re.compile(
    r"(?<![a-z])(api[_-]?key|apikey|token|secret|passw(?:or)?d|authorization|auth|credentials?|cookie|bearer)(?![a-z])",
    re.I,
)
_MIN_SECRET_LEN = 6  # shorter values ("1", "true") would blank out unrelated text
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def is_secret_name(name: str) -> bool:
    """True for keys/flags/env names that carry credentials (api_key, --api-key, HF_TOKEN, headers.Authorization)."""
    return bool(_SECRET_NAME.search(name.lstrip("-")))


def env_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of secret-looking environment variables (OPENAI_API_KEY, HF_TOKEN, ...)."""
    env = os.environ if environ is None else environ
    return {v for k, v in env.items() if is_secret_name(k) and _worth_hiding(v)}


def collect_secrets(obj: Any) -> set[str]:
    """Secret values found in a spec-like structure: under secret keys, or after secret flags in lists."""
    out: set[str] = set()
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k):
                if isinstance(v, Mapping):
                    out |= {x for x in v.values() if isinstance(x, str)}
                elif isinstance(v, str):
                    out.add(v)
            out |= collect_secrets(v)
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            if isinstance(v, str) and v.startswith("-") and is_secret_name(v):
                if "=" in v:
                    out.add(v.split("=", 1)[1])
                elif i + 1 < len(obj) and isinstance(obj[i + 1], str):
                    out.add(obj[i + 1])
            out |= collect_secrets(v)
    return {s for s in out if _worth_hiding(s)}


def _worth_hiding(s: str) -> bool:
    """Placeholders (${HF_TOKEN}, {env:X}) are references, short or numeric values are noise."""
    return len(s) >= _MIN_SECRET_LEN and not s.isdigit() and not s.startswith(("${", "{env:"))


class Redactor:
    """Replaces every known secret value in text and in JSON-like structures."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: set[str] = {s for s in secrets if s and _worth_hiding(s)}

    def add(self, *secrets: str) -> None:
        self.secrets |= {s for s in secrets if s and _worth_hiding(s)}

    def text(self, s: str) -> str:
        # longest first, so a secret that contains another is replaced whole
        for secret in sorted(self.secrets, key=len, reverse=True):
            if secret in s:
                s = s.replace(secret, REDACTED)
        return s

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line safe to print or store: values after secret flags and known secrets hidden."""
        out: list[str] = []
        hide_next = False
        for a in argv:
            a = str(a)
            if hide_next:
                out.append(REDACTED)
                hide_next = False
                continue
            if a.startswith("-") and is_secret_name(a):
                if "=" in a:
                    out.append(a.split("=", 1)[0] + "=" + REDACTED)
                else:
                    out.append(a)
                    hide_next = True
                continue
            out.append(self.text(a))
        return out

    def obj(self, obj: Any) -> Any:
        """Deep copy of a JSON-like value with secret keys blanked and secret values replaced."""
        if isinstance(obj, Mapping):
            return {
                k: (
                    REDACTED
                    if isinstance(k, str) and is_secret_name(k) and _scalar_or_map(v)
                    else self.obj(v)
                )
                for k, v in obj.items()
            }
        if isinstance(obj, list | tuple):
            return self.argv(obj) if all(isinstance(x, str) for x in obj) else [self.obj(x) for x in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj


def _scalar_or_map(v: Any) -> bool:
    """Credentials are strings (or maps of them, like headers); `first_token: 60` is a timeout, not a secret."""
    return isinstance(v, str | Mapping)


def spec_redactor(specs: Iterable[ExperimentSpec]) -> Redactor:
    """Every secret we could write: env credentials, spec values under secret keys, header ${ENV} values."""
    r = Redactor(env_secrets())
    for spec in specs:
        r.add(*collect_secrets(spec.raw))
        for v in spec.headers.values():
            r.add(*(os.environ.get(m.group(1), "") for m in _ENV_REF.finditer(v)))
        with contextlib.suppress(HarnessError):
            r.add(*spec.resolved_headers().values())
    return r
