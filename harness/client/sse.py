"""One incremental Server-Sent Events parser for every dialect: bytes in, complete `data` payloads out."""

from __future__ import annotations


class SSEParser:
    """Feed raw chunks as they arrive; get back the data of each completed event (multi-line data joined).

    `_tail` always starts at a line start and holds bytes not yet parsed; `_held` holds later pieces of
    the same unfinished line, kept without rescanning (so an event of n bytes in k reads costs O(n), not
    O(n * k)); `_data` holds the data lines of an event whose blank line has not arrived. The common shape
    (`data: X` + blank line, no CR, nothing pending) is split in a few C calls; anything else goes through
    the line-by-line path.
    """

    __slots__ = ("_tail", "_held", "_data", "comments")

    def __init__(self) -> None:
        self._tail = b""
        self._held: list[bytes] = []
        self._data: list[bytes] = []
        self.comments = 0  # keep-alive comments seen (`: ping`); they are bytes, never tokens

    def idle(self) -> bool:
        """Nothing pending: the next bytes start a new line of a new event."""
        return not (self._tail or self._held or self._data)

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._tail:
            if b"\n" not in chunk:  # the pending line is still arriving: nothing to parse yet
                self._held.append(chunk)
                return []
            if self._held:
                chunk = b"".join((self._tail, *self._held, chunk))
                self._held.clear()
            else:
                chunk = self._tail + chunk
        if self._data or b"\r" in chunk:
            return self._feed_lines(chunk)
        if chunk.startswith(b"data: ") and chunk.endswith(b"\n\n"):
            # whole single-line events only: every newline is one of the blank-line separators
            events = chunk[6:-2].split(b"\n\ndata: ")
            if chunk.count(b"\n") == 2 * len(events):
                self._tail = b""
                return events
        parts = chunk.split(b"\n\n")
        tail = parts.pop()  # after the last blank line: an event still arriving (b"" if none)
        out: list[bytes] = []
        for p in parts:
            if p[:6] == b"data: " and b"\n" not in p:
                out.append(p[6:])
            else:
                self._event_block(p, out)
        if b"\n" in tail:  # complete lines of an unfinished event: take them now, keep only the last line
            lines = tail.split(b"\n")
            tail = lines.pop()
            self._lines(lines, out)
        self._tail = tail
        return out

    def _event_block(self, block: bytes, out: list[bytes]) -> None:
        """Lines of one block that a blank line ended (so whatever data it holds is dispatched)."""
        self._lines(block.split(b"\n"), out)
        data = self._data
        if data:
            out.append(data[0] if len(data) == 1 else b"\n".join(data))
            data.clear()

    def _feed_lines(self, chunk: bytes) -> list[bytes]:
        lines = chunk.split(b"\n")
        self._tail = lines.pop()  # incomplete last line (b"" when the chunk ended on a newline)
        out: list[bytes] = []
        self._lines(lines, out)
        return out

    def _lines(self, lines: list[bytes], out: list[bytes]) -> None:
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line[0:1] == b":":
                self.comments += 1
            # event:, id:, retry: and unknown fields carry nothing we use

    def close(self) -> list[bytes]:
        """Whatever complete data is pending when the stream ends without a final blank line."""
        out: list[bytes] = []
        if self._tail or self._held:
            tail = b"".join((self._tail, *self._held))
            self._tail = b""
            self._held.clear()
            self._lines(tail.split(b"\n"), out)
        if self._data:
            out.append(b"\n".join(self._data))
            self._data.clear()
        return out
