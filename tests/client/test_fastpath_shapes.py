"""The same-shape fast path on servers whose events change per event or per request.

A per-event timestamp, an id per request and a role on the first text event must stay on the fast
path (few full parses), and whatever the fast path takes must be exactly what a JSON parse gives.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.capture.records import RequestRecord
from harness.client import StreamState, get_dialect
from harness.client import events as events_mod
from harness.client.dialects import Dialect
from harness.client.events import EventSink
from harness.client.fastpath import learn
from harness.client.verdict import judge, take_usage


class _NoTimeout:
    def reschedule(self, when: float | None) -> None:
        pass


def _event(text: str, *, rid: str = "r1", created: object = 1, role: bool = False, fin=None, **top) -> bytes:
    delta = {"role": "assistant", "content": text} if role else {"content": text}
    obj = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": "m", **top}
    obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": fin}]
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _stream(dialect: Dialect, events: list[bytes], cut: int = 0) -> tuple[RequestRecord, StreamState, int]:
    """One stream through an EventSink on a shared dialect; (record, state, full JSON parses)."""
    calls = [0]
    real = events_mod.parse_json

    def counting(data: bytes) -> object:
        calls[0] += 1
        return real(data)

    events_mod.parse_json = counting
    try:
        rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=0, api=dialect.name)
        st_ = StreamState()
        ev = EventSink(rec, dialect, st_, _NoTimeout(), None)
        ev.head(200, 1.0)
        body = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        pieces = [body[i : i + cut] for i in range(0, len(body), cut)] if cut else [body]
        for i, p in enumerate(pieces):
            assert ev.body(p, 2.0 + i)
        ev.end(99.0)
        take_usage(rec, st_)
        judge(rec, st_)
    finally:
        events_mod.parse_json = real
    return rec, st_, calls[0]


def _usage() -> bytes:
    return b'{"id":"u","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8}}'


def _timestamped(rid: str, n: int = 8, t0: float = 1733000000.0) -> list[bytes]:
    evs = [_event(f" w{i}", rid=f"{rid}-{i}", created=t0 + i * 0.001234, role=i == 0) for i in range(n)]
    evs[-1] = _event(f" w{n - 1}", rid=rid, created=t0, fin="length")
    return [*evs, _usage()]


def test_per_event_timestamp_and_role_first_stay_on_the_fast_path():
    d = get_dialect("openai-chat")
    parses = []
    for r in range(4):
        rec, st_, n = _stream(d, _timestamped(f"req{r}"))
        assert st_.pieces == [f" w{i}" for i in range(8)] and st_.finish == "length" and rec.ok
        assert rec.first_token_mono == 2.0 and len(rec.token_mono) == 8
        parses.append(n)
    # the first streams learn (each learn adds a probe parse); later ones parse only the usage event
    # (the finish event, an id per request, takes a holed final template)
    assert parses[-1] == 1 and parses[0] > parses[-1]
    assert any(t.rx is not None for t in d.templates)  # the holed template exists
    assert [t.finish for t in d.finals] == ["length"] and d.finals[0].rx is not None


def test_a_new_id_per_request_reuses_the_run_template_from_the_first_token():
    d = get_dialect("openai-chat")
    for r in range(3):
        evs = [_event(f" t{i}", rid=f"chatcmpl-{r:04x}") for i in range(6)] + [_usage()]
        rec, st_, n = _stream(d, evs, cut=5)
        assert st_.pieces == [f" t{i}" for i in range(6)] and rec.first_token_mono == rec.token_mono[0]
    assert n == 1  # only the usage frame: every text event, the first included, took the fast path


def test_a_hole_of_another_type_or_a_read_field_goes_to_the_full_parse():
    d = get_dialect("openai-chat")
    for r in range(2):
        _stream(d, _timestamped(f"req{r}"))
    odd = [
        _event(" a", rid="x", created=None),  # the hole's value is not a number: full parse, same result
        _event(" b", rid="x", created="late"),  # a string where a number was
        _event(" c", rid="x", created=5, usage={"completion_tokens": 3}),  # a read key added
        _event(' "q" \\', rid="x", created=6),  # escapes in the text
        _event(" d", rid="x", created=7, fin="stop"),
    ]
    rec, st_, n = _stream(d, odd)
    assert st_.pieces == [" a", " b", " c", ' "q" \\', " d"] and st_.finish == "stop"
    assert n >= 5 and st_.usage == {"completion_tokens": 3}


def test_an_escaped_read_key_is_never_a_hole():
    d = get_dialect("openai-chat")
    ev = b'{"id":"a","\\u0074imings":0,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}'
    first = learn(d, ev, "x", events_mod.parse_json)
    assert first is not None
    second = learn(d, ev.replace(b'"id":"a"', b'"id":"b"'), "x", events_mod.parse_json, [first])
    # "\u0074imings" is "timings", a key the dialect reads: only the id may be a hole
    assert second is not None and second.rx is not None
    assert second.match(ev.replace(b":0,", b":8,")) is None
    assert second.match(ev.replace(b'"id":"a"', b'"id":"zz"')) == "x"


_texts = st.text(max_size=5)
_created = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.text(max_size=4),
)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(_texts, _created, st.text(max_size=6), st.booleans()), min_size=1, max_size=10),
    st.integers(0, 9),
    st.integers(2, 4),
)
def test_fast_path_is_exact_for_any_per_event_fields(evs, cut, streams):
    d = get_dialect("openai-chat")
    for _ in range(streams):  # later streams start with templates the earlier ones proved
        raw = [_event(t, rid=i, created=c, role=r) for t, c, i, r in evs]
        _, st_, _ = _stream(d, raw, cut=cut)
        want = StreamState()
        for e in raw:
            d.event(want, json.loads(e))
        assert st_.pieces == want.pieces


_finishes = st.sampled_from(["length", "stop", "", None, "length\\u0000", 'a"b'])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_texts, _created, st.text(max_size=4), _finishes), min_size=1, max_size=6),
    st.integers(0, 9),
    st.integers(2, 4),
)
def test_final_templates_give_what_a_parse_gives(evs, cut, streams):
    """Text events that may carry any finish reason (the last one of a stream, or several): the final
    templates learnt on earlier streams take them as a JSON parse of each would."""
    d = get_dialect("openai-chat")
    for _ in range(streams):
        raw = [_event(t, rid=i, created=c, fin=f) for t, c, i, f in evs]
        rec, st_, _ = _stream(d, raw, cut=cut)
        want = StreamState()
        tokens = sum(bool(d.event(want, json.loads(e))) for e in raw)
        assert (st_.pieces, st_.finish, len(rec.token_mono)) == (want.pieces, want.finish, tokens)


def test_a_final_template_is_learnt_and_used():
    d = get_dialect("openai-chat")
    runs = []
    for _ in range(3):
        evs = [_event(f" t{i}", rid="c", fin="length" if i == 5 else None) for i in range(6)] + [_usage()]
        rec, st_, n = _stream(d, evs)
        assert st_.pieces == [f" t{i}" for i in range(6)] and st_.finish == "length" and rec.ok
        runs.append(n)
    assert runs[-1] == 1 and [t.finish for t in d.finals] == ["length"]  # only the usage event is parsed
    odd = [_event(" a", rid="c", fin="stop")]  # another finish reason: its own parse, its own value
    _, st_, n = _stream(d, odd)
    assert st_.finish == "stop" and n >= 1
