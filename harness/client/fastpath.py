"""Same-shape fast path for streamed text events: exact, and about 5x cheaper than a JSON parse.

Within one stream, servers send text events whose bytes differ only in the text itself
(`{"id":"x",...,"delta":{"content":"` + TEXT + `"},"finish_reason":null}]}`). After one such
event has been fully parsed, a template (prefix, suffix) is learnt and proven by parsing a probe
built from it; a later event that starts with the prefix, ends with the suffix and whose middle
holds no quote, backslash or control character then parses, by construction, to the same object
with that middle as its text, so the middle is taken as the text without a JSON parse. Anything
else (finish frame, usage, a changed field, escapes) goes through the full parse.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.client.dialects import Dialect, StreamState

_PROBE = "zq1probe1qz"


class TextTemplate:
    """The learnt (prefix, suffix) of one stream's plain text events."""

    __slots__ = ("prefix", "suffix", "lp", "ls")

    def __init__(self, prefix: bytes, suffix: bytes) -> None:
        self.prefix, self.suffix = prefix, suffix
        self.lp, self.ls = len(prefix), len(suffix)

    def match(self, data: bytes) -> str | None:
        """The text of data if it has this template's shape, else None (parse it in full).

        The body loop in harness.client.stream inlines this; keep the two the same.
        """
        if not (data.startswith(self.prefix) and data.endswith(self.suffix)):
            return None
        mid = data[self.lp : len(data) - self.ls]
        if not mid or b'"' in mid or b"\\" in mid:
            return None
        try:
            text = mid.decode()
        except UnicodeDecodeError:
            return None
        return text if text.isprintable() else None  # control characters etc.: the full parse decides


def learn(dialect: Dialect, data: bytes, text: str, parse: Callable[[bytes], object]) -> TextTemplate | None:
    """A template from a text event (data) whose text was `text`, or None when it cannot be proven.

    Proof: a probe built from the template parses, and the dialect takes the probe string, and
    nothing else, from it. Any event of the same shape then differs only in that one string token.
    """
    key = dialect.text_key
    if key is None:
        return None
    raw = b'"' + text.encode() + b'"'
    if data.count(raw) != 1:
        return None
    i = data.index(raw)
    prefix, suffix = data[: i + 1], data[i + len(raw) - 1 :]
    if not prefix[:-1].rstrip().endswith(key):
        return None
    try:
        probe = parse(prefix + _PROBE.encode() + suffix)
    except ValueError:
        return None
    if not isinstance(probe, dict):
        return None
    ps = StreamState()
    if not dialect.event(ps, probe) or ps.pieces != [_PROBE]:
        return None
    if ps.reasoning or ps.finish or ps.usage or ps.timings or ps.error or ps.done or ps.cum_text:
        return None
    return TextTemplate(prefix, suffix)
