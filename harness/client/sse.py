"""One incremental Server-Sent Events parser for every dialect: bytes in, complete `data` payloads out."""

from __future__ import annotations


class SSEParser:
    """Feed raw chunks as they arrive; get back the data of each completed event (multi-line data joined)."""

    __slots__ = ("_tail", "_data", "comments")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []
        self.comments = 0  # keep-alive comments seen (`: ping`); they are bytes, never tokens

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()  # incomplete last line (b"" when the chunk ended on a newline)
        out: list[bytes] = []
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
        return out

    def close(self) -> list[bytes]:
        """Whatever complete data is pending when the stream ends without a final blank line."""
        out = []
        if self._tail:
            out += self.feed(b"\n")
        if self._data:
            out.append(b"\n".join(self._data))
            self._data.clear()
        return out
