"""The streaming client: SSE parsing, dialects, and stamps/usage against a real server with known delays."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.capture.records import RequestRecord
from harness.client import SSEParser, StreamState, get_dialect, stream_request
from harness.client.http1 import H1Pool
from harness.workloads.prompts import BuiltPrompt


def test_sse_parser_events_comments_and_multiline():
    p = SSEParser()
    out = p.feed(b': ping\n\ndata: {"a":1}\n\nevent: x\nid: 3\ndata: line1\ndata:line2\n\ndata: [DONE]')
    assert out == [b'{"a":1}', b"line1\nline2"]
    assert p.comments == 1
    assert p.feed(b"\n\n") == [b"[DONE]"]
    q = SSEParser()
    assert q.feed(b'data: {"b":2}\r\n\r\n') == [b'{"b":2}']
    r = SSEParser()
    r.feed(b"data: tail-without-blank")
    assert r.close() == [b"tail-without-blank"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(1, 8))
def test_sse_parser_any_chunking(cuts, n_events):
    events = [f'{{"i":{i},"t":"x y"}}'.encode() for i in range(n_events)]
    stream = b"".join(b"data: " + e + b"\n\n" for e in events) + b": keep\n\n"
    p = SSEParser()
    got, pos = [], 0
    for c in cuts:
        got += p.feed(stream[pos : pos + c])
        pos += c
    got += p.feed(stream[pos:])
    got += p.close()
    assert got == events


def test_chat_dialect_token_rules():
    d, s = get_dialect("openai-chat"), StreamState()
    assert not d.event(s, {"choices": [{"delta": {"role": "assistant", "content": ""}}]})  # role-only prelude
    assert d.event(s, {"choices": [{"delta": {"reasoning_content": "hmm"}}]})
    assert d.event(s, {"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]})
    assert not d.event(s, {"choices": [{"delta": {}, "finish_reason": "length"}]})
    assert not d.event(
        s, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    )  # usage-only frame
    assert s.answer() == "<think>hmm</think>Hi" and s.finish == "length" and s.usage["prompt_tokens"] == 3
    body = d.body("m", BuiltPrompt([{"role": "user", "content": "x"}], 3, "h"), 7)
    assert b'"stream_options":{"include_usage":true}' in body and b'"ignore_eos":true' in body
    assert b'"max_tokens":7' in body


def test_generate_dialect_cumulative_text_to_deltas():
    d, s = get_dialect("sglang-generate"), StreamState()
    assert d.event(s, {"text": "Hello", "meta_info": {"finish_reason": None}})
    assert d.event(s, {"text": "Hello wor", "meta_info": {}})
    assert not d.event(s, {"text": "Hello wor", "meta_info": {}})  # no new text: not a token
    assert d.event(
        s,
        {
            "text": "Hello world",
            "meta_info": {"finish_reason": {"type": "length", "length": 3}, "cached_tokens": 5},
        },
    )
    assert s.pieces == ["Hello", " wor", "ld"] and s.answer() == "Hello world" and s.finish == "length"
    body = d.body("m", BuiltPrompt([1, 2, 3], 3, "h"), 4)
    assert b'"input_ids":[1,2,3]' in body and b'"max_new_tokens":4' in body


ENGINES = ["http1", "aiohttp"]


async def _one(
    url: str, api: str, text: str = "hello there", n: int = 8, engine: str = "http1", **kw
) -> RequestRecord:
    d = get_dialect(api)
    payload = [{"role": "user", "content": text}] if api == "openai-chat" else text
    rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=0, api=api)
    hdrs = {"Content-Type": "application/json"}
    body = d.body("m", BuiltPrompt(payload, None, "h"), n)
    rec.scheduled_mono = asyncio.get_running_loop().time()
    if engine == "http1":
        pool = H1Pool(url, hdrs, connect_timeout=5)
        try:
            await stream_request(pool, url + d.path, d, body, rec, **kw)
        finally:
            await pool.close()
    else:
        async with aiohttp.ClientSession() as session:
            await stream_request(session, url + d.path, d, body, rec, headers=hdrs, **kw)
    return rec


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "sglang-generate"])
def test_ttft_and_gaps_match_server_delays(fake_server_factory, api, engine):
    """Each token is stamped by the server with its monotonic send time (same clock, other process):
    the client must record every token within a few ms of that stamp, and the server must have
    applied its 60 ms first-token and 25 ms inter-token delays. Judging the client against the
    server's actual send times keeps the test honest on a loaded machine."""
    srv = fake_server_factory("--ttft-ms", "60", "--itl-ms", "25", "--keepalive", "--stamp-all")
    rec = asyncio.run(_one(srv.url, api, engine=engine))
    assert rec.ok, rec.error
    assert rec.first_byte_mono < rec.first_token_mono  # keep-alive / prelude arrive first, not tokens
    sent = [float(x) for x in re.findall(r"t(\d+\.\d{7})", rec.answer)]
    assert len(rec.token_mono) == len(sent) == 8
    assert sent[0] - rec.sent_mono >= 0.060 - 0.002  # the server held the first token 60 ms
    assert rec.ttft_sent_s == pytest.approx(rec.first_token_mono - rec.sent_mono)
    assert rec.ttft_sent_s >= 0.058
    lags = [c - s for c, s in zip(rec.token_mono, sent, strict=True)]
    # recorded within a few ms of sending: a stamp taken on a later chunk's arrival (buffering) would lag
    # by the 25 ms gap on every token; a loaded machine may deschedule the client for one or two of them
    assert all(-0.0005 <= lag < 0.050 for lag in lags), lags
    assert sum(lag < 0.010 for lag in lags) >= 6, lags
    # the server sends token k at (its start + 60 ms + k x 25 ms) or later if it was descheduled, and it
    # started after the client sent (comparing with sent[0] would fail whenever token 0 alone was late)
    assert all(s - rec.sent_mono >= 0.060 + k * 0.025 - 0.002 for k, s in enumerate(sent)), sent
    server_gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    client_gaps = [b - a for a, b in zip(rec.token_mono, rec.token_mono[1:], strict=False)]
    assert all(c == pytest.approx(s, abs=0.010) for c, s in zip(client_gaps, server_gaps, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_cached_tokens_and_llama_timings(fake_server_factory, engine):
    srv = fake_server_factory("--timings")
    a = asyncio.run(_one(srv.url, "openai-chat", "one two three four five six", engine=engine))
    b = asyncio.run(_one(srv.url, "openai-chat", "one two three four five six seven", engine=engine))
    assert a.cached_tokens == 0 and b.cached_tokens > 0
    assert b.server_timings and b.server_timings["cache_n"] == b.cached_tokens


@pytest.mark.slow
@pytest.mark.parametrize(
    ("marker", "kind"),
    [
        ("FAULT_500", "http"),
        ("FAULT_MALFORMED", "protocol"),
        ("FAULT_DROP", "disconnect"),
        ("FAULT_ERROR_EVENT", "http"),
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_faults_become_error_kinds(fake_server_factory, marker, kind, engine):
    srv = fake_server_factory("--itl-ms", "2")
    rec = asyncio.run(_one(srv.url, "openai-chat", f"please {marker} now", engine=engine))
    assert not rec.ok and rec.error_kind == kind, (rec.error_kind, rec.error)
    assert rec.error and "\n" not in rec.error
    if marker == "FAULT_500":
        assert rec.http_status == 500


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_timeouts_first_token_and_total(fake_server_factory, engine):
    srv = fake_server_factory("--itl-ms", "200")
    rec = asyncio.run(_one(srv.url, "openai-chat", "FAULT_HANG", first_token_timeout=0.3, engine=engine))
    assert rec.error_kind == "timeout-first-token"
    assert rec.done_mono - rec.sent_mono == pytest.approx(0.3, abs=0.2)
    rec2 = asyncio.run(
        _one(srv.url, "openai-chat", "slow", n=20, first_token_timeout=5, total_timeout=0.5, engine=engine)
    )
    assert rec2.error_kind == "timeout-total" and rec2.first_token_mono is not None


@pytest.mark.parametrize("engine", ENGINES)
def test_refused_connection(free_port, engine):
    rec = asyncio.run(_one(f"http://127.0.0.1:{free_port}", "openai-chat", engine=engine))
    assert not rec.ok and rec.error_kind == "connect"
