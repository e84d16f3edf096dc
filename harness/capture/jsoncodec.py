"""JSON on the per-request hot path: orjson when installed (the `fast` extra), else the standard library.

Measured here (benchmarks/bench_client.py, docs/client-ceiling.md): one record's encoding costs ~50 µs with
json and ~3 µs with orjson, a request body ~12 µs vs ~1 µs, so orjson earns its place as an optional
extra. Values and verdicts stay the standard library's: whatever orjson refuses (integers beyond 64
bits, lone surrogates, non-string keys, nesting beyond its limit; on reading also NaN, and any 19-digit
run, since orjson would read a big integer as a float) goes through json
instead. Two differences, both in the bytes only: a float's exponent is written `e-9` rather than
`e-09`, and a NaN or infinity is written as null (valid JSON) rather than NaN.
"""

from __future__ import annotations

import json
import json.scanner
from typing import Any

try:
    import orjson
except ImportError:  # the standard library alone is correct, only slower
    orjson = None  # type: ignore[assignment, unused-ignore]  # unused where orjson is absent (bare install)

_std = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode
_scan = json.scanner.c_make_scanner(json.JSONDecoder()) if json.scanner.c_make_scanner else None  # type: ignore[attr-defined]
FAST = orjson is not None
# orjson reads integers beyond 64 bits as floats: any run of 19 digits goes to json. Found by mapping digits
# to "0" and the rest to " " and searching the run: ~4 µs for a 1.2 kB record where re's [0-9]{19} took
# ~45 µs (it retries at every digit), more than the parse itself.
_DIGIT_MAP = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_RUN = b"0" * 19


def _long_int(data: bytes) -> bool:
    return _RUN in data.translate(_DIGIT_MAP)


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes (no spaces, UTF-8 unescaped), as json.dumps(separators=(",", ":")) gives."""
    if orjson is not None:
        try:
            return orjson.dumps(obj)
        except (TypeError, orjson.JSONEncodeError):
            pass
    return _std(obj).encode()


def dumps_line(obj: Any) -> bytes:
    """dumps(obj) + a newline: one JSONL record."""
    if orjson is not None:
        try:
            return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
        except (TypeError, orjson.JSONEncodeError):
            pass
    return (_std(obj) + "\n").encode()


def loads_tally(data: bytes) -> object:
    """loads for readers that use only flags and strings (a point's tally): orjson without the 19-digit
    check, since an integer beyond 64 bits read as a float changes nothing there; json for the rest."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return loads(data)


def loads(data: bytes) -> object:
    """One JSON value from bytes; ValueError when it is not exactly one (the per-event hot path)."""
    if orjson is not None and not _long_int(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the standard library decides (it accepts NaN, big integers, lone surrogates)
    s = data.decode()
    if s[:1].isspace():
        s = s.strip()
    if _scan is None:
        return json.loads(s)
    try:
        obj, end = _scan(s, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    except RecursionError:  # deeply nested junk is a protocol error, not a crash of the run (issue 8)
        raise ValueError("JSON nested too deeply") from None
    if end != len(s) and s[end:].strip():
        raise ValueError("trailing data")
    return obj
