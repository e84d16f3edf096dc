"""harness.capture.jsoncodec: with orjson (the `fast` extra) exactly what the standard library gives."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.capture import jsoncodec

pytest.importorskip("orjson")  # without it the codec is the standard library itself

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
    max_leaves=12,
)


def _finite(v: object) -> object:
    """v as orjson writes it: NaN and infinities become null (valid JSON, where json writes NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_finite(x) for x in v]
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    return v


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(_values)
def test_encoding_round_trips_to_what_the_standard_library_reads(v):
    std = json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()
    fast = jsoncodec.dumps(v)
    back = json.loads(fast)
    assert _same(back, json.loads(std)) or _same(
        back, _finite(v)
    )  # the standard library's fallback, or orjson's
    assert jsoncodec.dumps_line(v) == fast + b"\n"


@settings(max_examples=300, deadline=None)
@given(st.one_of(_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=20)))
def test_decoding_accepts_and_refuses_what_the_standard_library_does(data):
    try:
        s = data.decode()
        s = s.strip() if s[:1].isspace() else s
        want, end = json.JSONDecoder().raw_decode(s)  # the client's rule: one value, then only whitespace
        if s[end:].strip():
            raise ValueError("trailing data")
    except ValueError:
        with pytest.raises(ValueError):
            jsoncodec.loads(data)
        return
    assert _same(jsoncodec.loads(data), want)


def test_nesting_beyond_any_limit_is_a_value_error_not_a_crash():
    with pytest.raises(ValueError):
        jsoncodec.loads(b"[" * 100_000)


@pytest.mark.parametrize(
    "data",
    [
        b"1234567890123456789",
        b'{"a":[12345678901234567890]}',
        b'{"t":1.1234567890123456789}',
        b"-9999999999999999999",
    ],
)
def test_a_run_of_19_digits_is_read_by_the_standard_library(data):
    """orjson would read an integer beyond 64 bits as a float: such input goes to json (exact integers)."""
    assert jsoncodec._long_int(data)
    assert _same(jsoncodec.loads(data), json.loads(data))


@pytest.mark.parametrize(
    "data", [b"123456789012345678", b'{"a":"x1"}', b"", b'[1.5,"12345678 901234567890"]']
)
def test_shorter_digit_runs_take_the_fast_path(data):
    assert not jsoncodec._long_int(data)


@pytest.mark.parametrize(
    "data", [b'{"ok":true,"error_kind":null}\n', b'{"a":[12345678901234567890],"ok":false}', b"{bad", b"\xff"]
)
def test_a_tally_reads_flags_as_loads_does_and_refuses_the_same(data):
    try:
        want = jsoncodec.loads(data)
    except ValueError:
        with pytest.raises(ValueError):
            jsoncodec.loads_tally(data)
        return
    got = jsoncodec.loads_tally(data)
    assert (
        isinstance(got, dict)
        and got.get("ok") == want["ok"]
        and got.get("error_kind") == want.get("error_kind")
    )
