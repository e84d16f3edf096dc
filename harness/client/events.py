"""Body bytes -> SSE events -> stream state and stamps: the per-request sink both HTTP engines feed.

Times come from time.monotonic() once per received chunk; every event in that chunk shares it.
"""

from __future__ import annotations

import asyncio
import time

from harness.capture.jsoncodec import loads
from harness.capture.records import RequestRecord
from harness.client.dialects import Dialect, StreamState
from harness.client.fastpath import TextTemplate, learn, remember
from harness.client.sse import SSEParser

_mono = time.monotonic
ERROR_TEXT_MAX = 500
ERROR_BODY_MAX = 4096
LEARN_TRIES = 3  # text events per stream tried as a fast-path template before giving up


class EventSink:
    """One per request: applies body bytes to the stream state and stamps (see harness.client.http1.Sink)."""

    __slots__ = (
        "rec",
        "st",
        "feed",
        "parser",
        "dialect",
        "event",
        "tokens",
        "tmo",
        "total_at",
        "status",
        "err_body",
        "tpl",
        "tries",
        "first_bytes",
        "counts",
        "last_usage",
        "pinned",
    )

    def __init__(self, rec: RequestRecord, dialect: Dialect, st: StreamState, tmo, total_at: float | None):
        self.rec, self.st, self.dialect, self.event = rec, st, dialect, dialect.event
        kept = dialect.templates
        self.tpl: TextTemplate | None = kept[0] if kept else None  # proven on earlier streams of the run
        self.tries = LEARN_TRIES if dialect.text_key else 0
        self.parser = SSEParser()
        self.feed = self.parser.feed
        self.tokens = rec.token_mono
        self.tmo = tmo  # asyncio.Timeout to push to the total deadline at the first token (or None)
        self.total_at = total_at
        self.status = 200
        self.err_body: list[bytes] = []
        self.first_bytes = b""  # the body's first bytes, quoted when a 200 turns out not to be a stream
        self.counts: list[int] = []  # cumulative completion_tokens sent with each text event, where sent
        self.last_usage: object = None
        self.pinned = False  # a holed template was pinned to this stream's values (a plain one) once

    def head(self, status: int, now: float, routed: str | None = None) -> None:
        self.rec.http_status = self.status = status
        if routed is not None:
            self.rec.worker = routed

    def body(self, chunk: bytes, now: float) -> bool:
        """Apply received bytes; False when the stream is unusable (the failure is already recorded)."""
        rec = self.rec
        if self.status != 200:
            if sum(map(len, self.err_body)) < ERROR_BODY_MAX:
                self.err_body.append(chunk)
            return True
        if rec.first_byte_mono is None:
            rec.first_byte_mono = now
            self.first_bytes = chunk[:120]
        return self._apply(self.feed(chunk), now)

    def events(self, events: list[bytes], now: float) -> bool | None:
        """The data of whole events whose body bytes were exactly `data: X` + a blank line each (see
        harness.client.h1wire.whole_events); None (nothing taken) unless a 200 whose parser is idle."""
        if self.status != 200 or not self.parser.idle():
            return None
        rec = self.rec
        if rec.first_byte_mono is None:
            rec.first_byte_mono = now
            first = []  # the body's first 120 bytes, as body() keeps them
            size = 0
            for e in events:
                first.append(b"data: %s\n\n" % e)
                size += len(e) + 8
                if size >= 120:
                    break
            self.first_bytes = b"".join(first)[:120]
        return self._apply(events, now)

    def _apply(self, events: list[bytes], now: float) -> bool:
        """Apply the data of completed SSE events: stream state, per-token stamps, fast paths."""
        rec = self.rec
        st = self.st
        tpl = self.tpl
        if tpl is not None:
            prefix, suffix, lp, ls, rx = tpl.prefix, tpl.suffix, tpl.lp, tpl.ls, tpl.rx
        end = len(events)
        bulk = end > 2  # a run of events of the current plain shape is taken at once (_take_run)
        i = 0
        while i < end:
            data = events[i]
            i += 1
            # inlined TextTemplate.match: an event of a proven text shape is exact without a parse
            if tpl is not None:
                mid = None
                if rx is None:
                    if data.startswith(prefix) and data.endswith(suffix):
                        if bulk:
                            j = i
                            while j < end and events[j].startswith(prefix) and events[j].endswith(suffix):
                                j += 1
                            if j > i:
                                if self._take_run(events[i - 1 : j], lp, ls, now):
                                    i = j
                                    continue
                                bulk = False  # one of them needs the full parse: each on its own
                        mid = data[lp : len(data) - ls]
                else:
                    m = rx(data)
                    if m is not None:
                        mid = m.group(1)
                        if not self.pinned:  # this stream's values in the holes: a plain template (cheaper)
                            self.pinned = True
                            self.tpl = tpl = TextTemplate(data[: m.start(1)], data[m.end(1) :], tpl.skeleton)
                            prefix, suffix, lp, ls, rx = tpl.prefix, tpl.suffix, tpl.lp, tpl.ls, tpl.rx
                if mid and b'"' not in mid and b"\\" not in mid:
                    try:
                        text = mid.decode()
                    except UnicodeDecodeError:
                        text = ""
                    if text.isprintable() and text:
                        st.pieces.append(text)
                        self.tokens.append(now)
                        if rec.first_token_mono is None:  # a template kept from an earlier stream
                            self._first(now)
                        continue
            if data == b"[DONE]":
                st.done = True
                continue
            kept = self.dialect.templates  # other shapes this run has proven (e.g. a role-first event)
            if kept and (tpl is None or len(kept) > 1):
                other = self._other(data, tpl)
                if other is not None:
                    tpl, text = other
                    prefix, suffix, lp, ls, rx = tpl.prefix, tpl.suffix, tpl.lp, tpl.ls, tpl.rx
                    st.pieces.append(text)
                    self.tokens.append(now)
                    if rec.first_token_mono is None:
                        self._first(now)
                    continue
            if self.dialect.finals and self._final(data, now):
                continue
            fin0 = st.finish
            try:
                obj = parse_json(data)
            except ValueError:
                return self._stop(now, f"malformed SSE data: {data[:120]!r}")
            if not isinstance(obj, dict):
                return self._stop(now, f"SSE data is not a JSON object: {data[:120]!r}")
            n = len(st.pieces)
            try:
                is_token = self.event(st, obj)
            except (AttributeError, TypeError, KeyError, IndexError, ValueError):
                # a JSON object of an unexpected shape (e.g. "choices": "x") is the server's fault (issue 8)
                return self._stop(now, f"SSE event of an unexpected shape: {data[:120]!r}")
            if is_token:
                self.tokens.append(now)
                u = st.usage
                if u is not self.last_usage:  # this event carried its own count (per-chunk usage, meta_info)
                    self.last_usage = u
                    c = u.get("completion_tokens") if isinstance(u, dict) else None
                    if isinstance(c, int):
                        self.counts.append(c)
                if self.tries and len(st.pieces) == n + 1 and st.finish is None:
                    self.tries -= 1
                    new = learn(self.dialect, data, st.pieces[-1], parse_json, self.dialect.templates)
                    if new is not None:
                        remember(self.dialect, new)
                        self.tpl = tpl = new
                        prefix, suffix, lp, ls, rx = tpl.prefix, tpl.suffix, tpl.lp, tpl.ls, tpl.rx
                elif fin0 is None and st.finish is not None and len(st.pieces) == n + 1:
                    self._learn_final(data, st.pieces[-1], st.finish)
                if rec.first_token_mono is None:
                    self._first(now)
        return True

    def _final(self, data: bytes, now: float) -> bool:
        """The last text event, with its finish reason, of a shape this run has proven: taken, True."""
        for t in self.dialect.finals:
            text = t.match(data)
            if text:
                st = self.st
                st.pieces.append(text)
                st.finish = t.finish
                self.tokens.append(now)
                if self.rec.first_token_mono is None:
                    self._first(now)
                return True
        return False

    def _learn_final(self, data: bytes, text: str, finish: str) -> None:
        """Learn a final template from this event (its text and finish reason), while tries are left."""
        d = self.dialect
        if d.text_key and d.final_tries > 0:
            d.final_tries -= 1
            new = learn(d, data, text, parse_json, d.finals, finish)
            if new is not None:
                remember(d, new)

    def _take_run(self, run: list[bytes], lp: int, ls: int, now: float) -> bool:
        """Events of the current plain template, in a row: their texts taken together when every one
        passes the per-event checks (non-empty, no quote or backslash, UTF-8, printable); False (nothing
        taken) otherwise. Same pieces and stamps as one at a time, with a few C calls per run."""
        mids = [d[lp : len(d) - ls] for d in run]
        joined = b"".join(mids)
        if b'"' in joined or b"\\" in joined or not all(mids):
            return False
        try:
            texts = list(map(bytes.decode, mids))
        except UnicodeDecodeError:
            return False
        if not "".join(texts).isprintable():
            return False
        self.st.pieces += texts
        self.tokens += [now] * len(texts)
        if self.rec.first_token_mono is None:
            self._first(now)
        return True

    def _first(self, now: float) -> None:
        """The first token: stamp it and move the deadline to the total one."""
        self.rec.first_token_mono = now
        if self.total_at is not None:
            self.tmo.reschedule(loop_time_at(self.total_at))

    def _other(self, data: bytes, current: TextTemplate | None) -> tuple[TextTemplate, str] | None:
        """A kept template other than the current one that matches data, and its text (it becomes current)."""
        for t in self.dialect.templates:
            if t is not current:
                text = t.match(data)
                if text:
                    self.tpl = t
                    return t, text
        return None

    def _stop(self, now: float, why: str) -> bool:
        rec = self.rec
        rec.done_mono = now
        rec.ok, rec.error_kind, rec.error = False, "protocol", why
        return False

    def end(self, now: float) -> None:
        self.rec.done_mono = now
        if self.status == 200:
            for data in self.parser.close():
                if data == b"[DONE]":
                    self.st.done = True

    def event_tokens(self) -> list[int] | None:
        """Tokens carried by each text event, when every one of them came with a cumulative count."""
        counts = self.counts
        if not counts or len(counts) != len(self.tokens):
            return None
        return [b - a for a, b in zip([0, *counts], counts, strict=False)]

    def error_text(self) -> str:
        text = b"".join(self.err_body)[:ERROR_BODY_MAX].decode("utf-8", "replace")
        return f"HTTP {self.status}: {text.strip()[:ERROR_TEXT_MAX]}"


parse_json = loads  # one JSON value per SSE event (orjson when installed); a name tests can wrap


def loop_time_at(mono_deadline: float) -> float:
    """asyncio deadlines use loop.time(), which is time.monotonic() on the default loops; map anyway."""
    loop = asyncio.get_running_loop()
    return loop.time() + (mono_deadline - _mono())
