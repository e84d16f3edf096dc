"""Same-shape fast path for streamed text events: exact, and about 5x cheaper than a JSON parse.

Servers send text events whose bytes differ only in the text itself
(`{"id":"x",...,"delta":{"content":"` + TEXT + `"},"finish_reason":null}]}`), and sometimes in
top-level fields the dialect never reads (a per-event `created` timestamp, a per-request `id`).
After one such event has been fully parsed, a template is learnt and proven by parsing a probe
built from it: a plain one (prefix, suffix), or, when a second event of the same skeleton differed
only in unread top-level scalars, a holed one (a regex whose holes take exactly a JSON number or an
escape-free ASCII string). A later event that matches, and whose text holds no quote, backslash or
control character, then parses, by construction, to the same object up to the text and fields the
dialect ignores, so the text is taken without a JSON parse. Anything else (finish frame, usage, a
changed read field, escapes, a value of another type) goes through the full parse.

Templates are proven from bytes alone, so a run keeps its last few on the dialect (`Dialect.templates`)
and every stream starts with them: a role on the first text event, or an id per request, costs one
parse per shape per run, not per stream. A holed template that matches a stream's event is pinned
to that event's hole values once per stream (a plain template, exact for events with those values):
an id per request then costs one regex match per stream, not one per event.

The last text event of a stream also carries the finish reason (`"finish_reason":"length"`): it is
learnt the same way as a final template (`TextTemplate.finish`, kept apart in `Dialect.finals`),
proven by a probe from which the dialect takes the probe string and that finish reason, and nothing
else; a later final event of that shape gives its text and finish reason without a parse.
"""

from __future__ import annotations

import json.decoder
import json.scanner
import re
from collections.abc import Callable

from harness.client.dialects import Dialect, StreamState

_PROBE = "zq1probe1qz"
KEEP = 4  # templates a dialect keeps across streams (role-first event, plain text event, ...)
KEEP_FINALS = 2  # final templates (text + finish reason) a dialect keeps
_NUM = rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_STR = rb'"[\x20\x21\x23-\x5b\x5d-\x7e]*"'  # printable ASCII, no quote, no backslash: no escapes
_TEXT = rb'([^"\\]+)'
_NUM_RX, _STR_RX = re.compile(_NUM), re.compile(_STR)
# typeshed types make_scanner's context as a make_scanner; the C scanner takes any decoder (json.decoder does)
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]  # undocumented, absent from typeshed
_WS = " \t\n\r"


class TextTemplate:
    """A proven shape of one kind of text event: plain (prefix, suffix) or holed (rx)."""

    __slots__ = ("prefix", "suffix", "lp", "ls", "rx", "skeleton", "finish")

    def __init__(
        self,
        prefix: bytes,
        suffix: bytes,
        skeleton: bytes,
        rx: re.Pattern[bytes] | None = None,
        finish: str | None = None,
    ):
        self.prefix, self.suffix, self.skeleton = prefix, suffix, skeleton
        self.finish = finish  # a final template: the finish reason its events carry
        self.lp, self.ls = len(prefix), len(suffix)
        self.rx = rx.fullmatch if rx is not None else None

    def match(self, data: bytes) -> str | None:
        """The text of data if it has this template's shape, else None (parse it in full).

        The body loop in harness.client.events inlines this; keep the two the same.
        """
        if self.rx is None:
            if not (data.startswith(self.prefix) and data.endswith(self.suffix)):
                return None
            mid = data[self.lp : len(data) - self.ls]
        else:
            m = self.rx(data)
            if m is None:
                return None
            mid = m.group(1)
        if not mid or b'"' in mid or b"\\" in mid:
            return None
        try:
            text = mid.decode()
        except UnicodeDecodeError:
            return None
        return text if text.isprintable() else None  # control characters etc.: the full parse decides


def learn(
    dialect: Dialect,
    data: bytes,
    text: str,
    parse: Callable[[bytes], object],
    known: list[TextTemplate] | tuple[TextTemplate, ...] = (),
    finish: str | None = None,
) -> TextTemplate | None:
    """A template from a text event (data) whose text was `text`, or None when it cannot be proven.
    With `finish`, a final template: the event also carried that finish reason (and nothing else).

    Holed when one of `known` has the same skeleton (the two events differ only in top-level fields
    the dialect does not read), else plain. Proof: a probe built from the template parses, and the
    dialect takes the probe string, and nothing else, from it; for a holed template a second probe,
    its holes refilled, must give the same.
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
    text_span = (len(prefix), len(data) - len(suffix))
    holes = _holes(data, dialect.read_keys, text_span)
    skeleton = _skeleton(data, holes, text_span)
    if not _proves(dialect, prefix + _PROBE.encode() + suffix, parse, finish):
        return None
    same = [t for t in known if t.skeleton == skeleton]
    if any(t.match(data) is not None for t in same):
        return None  # already proven (learnt by another stream meanwhile)
    if holes and same:
        if not _proves(dialect, _refill(data, holes, text_span), parse, finish):
            return None
        return TextTemplate(prefix, suffix, skeleton, _regex(data, holes, text_span), finish)
    return TextTemplate(prefix, suffix, skeleton, None, finish)


def _proves(
    dialect: Dialect, probe_bytes: bytes, parse: Callable[[bytes], object], finish: str | None = None
) -> bool:
    try:
        probe = parse(probe_bytes)
    except ValueError:
        return False
    if not isinstance(probe, dict):
        return False
    ps = StreamState()
    try:
        if not dialect.event(ps, probe) or ps.pieces != [_PROBE]:
            return False
    except (AttributeError, TypeError, KeyError, IndexError, ValueError):
        return False
    return ps.finish == finish and not (
        ps.reasoning or ps.usage or ps.timings or ps.error or ps.done or ps.cum_text
    )


def _holes(
    data: bytes, read_keys: frozenset[str], text_span: tuple[int, int]
) -> list[tuple[int, int, bytes]]:
    """(start, end, pattern) of each top-level scalar the dialect never reads, as byte offsets."""
    try:
        s = data.decode()
    except UnicodeDecodeError:
        return []
    spans = _top_level(s)
    if spans is None:
        return []
    ascii_ = len(s) == len(data)
    out = []
    for k, a, b in spans:
        if k in read_keys:
            continue
        if not ascii_:
            a, b = len(s[:a].encode()), len(s[:b].encode())
        if a < text_span[1] and text_span[0] < b:
            continue
        v = data[a:b]
        pat = _NUM if _NUM_RX.fullmatch(v) else _STR if _STR_RX.fullmatch(v) else None
        if pat is not None:
            out.append((a, b, pat))
    return out


def _top_level(s: str) -> list[tuple[str, int, int]] | None:
    """(key, value start, value end) of each member of the top-level object, in order; None if not one."""
    n = len(s)

    def ws(i: int) -> int:
        while i < n and s[i] in _WS:
            i += 1
        return i

    i = ws(0)
    if s[i : i + 1] != "{":
        return None
    i = ws(i + 1)
    out: list[tuple[str, int, int]] = []
    if s[i : i + 1] == "}":
        return out
    try:
        while True:
            if s[i : i + 1] != '"':
                return None
            k, i = _scanstring(s, i + 1)
            i = ws(i)
            if s[i : i + 1] != ":":
                return None
            a = ws(i + 1)
            _, b = _scan(s, a)
            out.append((k, a, b))
            i = ws(b)
            if s[i : i + 1] == ",":
                i = ws(i + 1)
                continue
            return out if s[i : i + 1] == "}" else None
    except (StopIteration, ValueError, RecursionError):
        return None


def _skeleton(data: bytes, holes: list[tuple[int, int, bytes]], text_span: tuple[int, int]) -> bytes:
    """The event with the text and every hole cut out: two events of one skeleton differ only there."""
    out, pos = [], 0
    for a, b, pat in sorted([*holes, (*text_span, b"T")]):
        out += [data[pos:a], b"\0" + pat[:1]]
        pos = b
    out.append(data[pos:])
    return b"".join(out)


def _regex(data: bytes, holes: list[tuple[int, int, bytes]], text_span: tuple[int, int]) -> re.Pattern[bytes]:
    parts, pos = [], 0
    for a, b, pat in sorted([*holes, (*text_span, _TEXT)]):
        parts += [re.escape(data[pos:a]), pat if pat == _TEXT else b"(?:" + pat + b")"]
        pos = b
    parts.append(re.escape(data[pos:]))
    return re.compile(b"".join(parts), re.DOTALL)


def _refill(data: bytes, holes: list[tuple[int, int, bytes]], text_span: tuple[int, int]) -> bytes:
    """The probe with every hole given another value of its kind (the proof that the dialect ignores them)."""
    out, pos = [], 0
    for a, b, pat in sorted([*holes, (*text_span, _TEXT)]):
        if pat == _TEXT:
            other = _PROBE.encode()
        else:
            other = b"7" if pat == _NUM else b'"zq2"'
            if data[a:b] == other:
                other = b"8" if pat == _NUM else b'"zq3"'
        out += [data[pos:a], other]
        pos = b
    out.append(data[pos:])
    return b"".join(out)


def remember(dialect: Dialect, tpl: TextTemplate) -> None:
    """Keep tpl for the dialect's later streams: it replaces a template of its skeleton, else the oldest
    (final templates are kept apart, in dialect.finals)."""
    if tpl.finish is not None:
        dialect.finals = [tpl, *[t for t in dialect.finals if t.skeleton != tpl.skeleton]][:KEEP_FINALS]
        return
    kept = [t for t in dialect.templates if t.skeleton != tpl.skeleton]
    dialect.templates = [tpl, *kept][:KEEP]
