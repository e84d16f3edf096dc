"""HTTP tests against a real `harness serve-sim` process on 127.0.0.1."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest

from harness.engines import logs
from harness.tokenizer import WordTokenizer, render_chat
from tests.helpers.procs import SimProc

pytestmark = pytest.mark.slow  # every test here talks to one serve-sim process

TOK = WordTokenizer()
BASE_ARGS = (
    "--card-profile", "tiny-test", "--time-scale", "0.05", "--max-total-tokens", "6000",
    "--enable-metrics", "--enable-cache-report", "--decode-log-interval", "4",
)  # fmt: skip


def words(n: int, seed: int) -> str:
    import random

    return TOK.random_words(random.Random(seed), n)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    s = SimProc(tmp_path_factory.mktemp("sim"), *BASE_ARGS)
    yield s
    assert s.stop() == 0  # SIGTERM shuts down cleanly


def chat(url: str, messages: list[dict], **extra) -> dict:
    body = {"model": "m", "messages": messages, "max_tokens": 8, "ignore_eos": True, **extra}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def sse_events(resp: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in resp.iter_lines() if line.startswith("data: ")]


def test_control_endpoints(sim):
    assert httpx.get(sim.url + "/health").status_code == 200
    assert httpx.get(sim.url + "/health_generate", timeout=10).status_code == 200
    for path in ("/get_server_info", "/server_info"):
        info = httpx.get(sim.url + path).json()
        assert info["max_total_num_tokens"] == 6000
        assert info["radix_eviction_policy"] == "lru"
        assert info["enable_cache_report"] is True
    assert httpx.get(sim.url + "/get_model_info").json()["model_path"] == "sim-model"
    models = httpx.get(sim.url + "/v1/models").json()
    assert models["data"][0]["id"] == "sim-model"


def test_chat_repeated_prefix_reports_cached_tokens(sim):
    system = {"role": "system", "content": words(300, 1)}
    m1 = [system, {"role": "user", "content": words(20, 2)}]
    first = chat(sim.url, m1)
    assert first["usage"]["prompt_tokens"] == len(TOK.encode(render_chat(m1)))
    assert first["usage"]["completion_tokens"] == 8
    assert first["usage"]["prompt_tokens_details"] is None  # nothing cached: null, as SGLang
    second = chat(sim.url, [system, {"role": "user", "content": words(20, 3)}])
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 300 <= cached < second["usage"]["prompt_tokens"]


def test_multi_turn_history_hits_the_previous_answer(sim):
    m1 = [{"role": "user", "content": words(100, 10)}]
    a1 = chat(sim.url, m1, max_tokens=16)["choices"][0]["message"]["content"]
    assert len(a1.split()) == 16
    m2 = [*m1, {"role": "assistant", "content": a1}, {"role": "user", "content": words(10, 11)}]
    r2 = chat(sim.url, m2)
    turn1_tokens = len(TOK.encode(render_chat(m1)))
    # prompt + answer minus its last token (which has no KV yet) were inserted when turn 1 finished
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= turn1_tokens + 16 - 1


def test_stream_usage_only_with_include_usage(sim):
    msgs = [{"role": "user", "content": words(30, 20)}]
    body = {"messages": msgs, "max_tokens": 6, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body, timeout=30) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["usage"] is None for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert len(text.split()) == 6
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    body["stream_options"] = {"include_usage": True}
    with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body, timeout=30) as r:
        events2 = sse_events(r)
    last = json.loads(events2[-2])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 6
    assert last["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # same prompt again
    text2 = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events2[:-2])
    assert text2 == text  # answers are deterministic for a prompt


def test_completions_endpoint(sim):
    r = httpx.post(
        sim.url + "/v1/completions",
        json={"prompt": words(50, 30), "max_tokens": 5, "ignore_eos": True},
        timeout=30,
    )
    assert r.status_code == 200
    out = r.json()
    assert out["object"] == "text_completion"
    assert len(out["choices"][0]["text"].split()) == 5
    assert out["usage"]["prompt_tokens"] == 50


def test_generate_input_ids_and_cumulative_stream(sim):
    ids = TOK.encode(words(40, 40))
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
    r = httpx.post(sim.url + "/generate", json=body, timeout=30).json()
    meta = r["meta_info"]
    assert meta["prompt_tokens"] == 40 and meta["completion_tokens"] == 5
    assert (
        meta["cached_tokens"] == 0 and meta["cached_tokens_details"] is None
    )  # a full miss: null, as 0.5.23
    assert meta["finish_reason"]["type"] == "length" and meta["e2e_latency"] > 0
    again = httpx.post(sim.url + "/generate", json=body, timeout=30).json()["meta_info"]
    assert again["cached_tokens"] == 39 == again["cached_tokens_details"]["device"]
    with httpx.stream("POST", sim.url + "/generate", json={**body, "stream": True}, timeout=30) as resp:
        events = sse_events(resp)
    assert events[-1] == "[DONE]"
    texts = [json.loads(e)["text"] for e in events[:-1]]
    assert len(texts) == 5
    for a, b in zip(texts, texts[1:], strict=False):
        assert b.startswith(a) and len(b) > len(a)  # cumulative, not deltas
    assert texts[-1] == r["text"]


def test_bad_input_is_400(sim):
    r = httpx.post(sim.url + "/generate", json={"sampling_params": {}}, timeout=10)
    assert r.status_code == 400 and "text or input_ids" in r.json()["message"]
    r = httpx.post(sim.url + "/generate", json={"input_ids": list(range(7000))}, timeout=10)
    assert r.status_code == 400


def test_flush_refused_while_pending(sim):
    body = {
        "text": words(20, 50),
        "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},  # >= 0.2 s of wall time
        "stream": True,
    }
    started = threading.Event()
    done = threading.Event()

    def long_request() -> None:
        with httpx.stream("POST", sim.url + "/generate", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    started.set()
        done.set()

    t = threading.Thread(target=long_request)
    t.start()
    assert started.wait(20)
    r = httpx.post(sim.url + "/flush_cache", timeout=10)
    assert r.status_code == 400
    assert "When there are running or waiting requests" in r.text
    t.join(60)
    assert done.is_set()
    time.sleep(0.05)
    assert httpx.post(sim.url + "/flush_cache", timeout=10).status_code == 200
    log = sim.log()
    assert re.search(
        r"Cache not flushed because there are pending requests\. #queue-req: 0, #running-req: [1-9]\d*", log
    )
    assert "Cache flushed successfully!" in log


PREFIX = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] "
LOG_PATTERNS = {
    "kv_pool": PREFIX
    + r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: 6000, K size: \d+\.\d\d GB, V size: \d+\.\d\d GB$",
    "scheduler": PREFIX + r"max_total_num_tokens=6000, chunked_prefill_size=\d+, max_prefill_tokens=\d+, "
    r"max_running_requests=\d+, context_len=\d+, available_gpu_mem=\d+\.\d\d GB$",
    "ready": PREFIX + r"The server is fired up and ready to roll!$",
    "prefill": PREFIX
    + r"Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: \d+, token usage: \d\.\d\d, "
    r"#running-req: \d+, #queue-req: \d+, #pending-token: \d+, cuda graph: (True|False), "
    r"input throughput \(token/s\): \d+\.\d\d$",
    "decode": PREFIX
    + r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d\.\d\d, cuda graph: (True|False), "
    r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+$",
}


def test_log_lines_in_sglang_formats(sim):
    chat(sim.url, [{"role": "user", "content": words(30, 60)}], max_tokens=12)
    log = sim.log()
    for kind, pattern in LOG_PATTERNS.items():
        assert re.search(pattern, log, re.M), f"no {kind} line matching {pattern!r}"
    cached = [int(m) for m in re.findall(r"#cached-token: (\d+)", log)]
    assert max(cached) >= 300  # the repeated system prompt of an earlier test

    parsed = logs.parse_file(sim.log_path)
    kinds = {r.kind for r in parsed.records}
    assert len(kinds) >= 3, kinds


def test_api_key_required(tmp_path):
    s = SimProc(tmp_path, "--card-profile", "tiny-test", "--time-scale", "0.05", "--api-key", "sekret")
    try:
        assert httpx.get(s.url + "/health").status_code == 200
        body = {"text": "baba", "sampling_params": {"max_new_tokens": 2}}
        assert httpx.post(s.url + "/generate", json=body).status_code == 401
        ok = httpx.post(s.url + "/generate", json=body, headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200
        info = httpx.get(s.url + "/get_server_info", headers={"Authorization": "Bearer sekret"}).text
        assert "sekret" not in info and "sekret" not in s.log()
    finally:
        assert s.stop() == 0


def test_priority_must_be_an_integer_on_every_api(sim):
    """SGLang's request types declare `priority: Optional[int]`: another value is a 400, an integer is taken."""
    bodies = {
        "/generate": {"text": "a b c", "sampling_params": {"max_new_tokens": 2}},
        "/v1/completions": {"model": "m", "prompt": "a b c", "max_tokens": 2},
        "/v1/chat/completions": {
            "model": "m",
            "messages": [{"role": "user", "content": "a b"}],
            "max_tokens": 2,
        },
    }
    for path, body in bodies.items():
        bad = httpx.post(sim.url + path, json={**body, "priority": "high"}, timeout=30)
        assert bad.status_code == 400 and "priority must be an integer" in bad.text, (path, bad.text)
        assert httpx.post(sim.url + path, json={**body, "priority": -3}, timeout=30).status_code == 200


def test_a_queue_limit_abort_answers_503_as_sglang_does(tmp_path):
    """--max-queued-requests 1 behind one running request: a third request is aborted by the scheduler
    and, not streamed, answered HTTP 503 with SGLang 0.5.23's ErrorResponse (tokenizer_manager
    `_handle_abort_finish_reason` raises HTTPException(503); /generate and the OpenAI routes both answer it)."""
    s = SimProc(
        tmp_path, "--card-profile", "tiny-test", "--time-scale", "1", "--max-running-requests", "1",
        "--max-queued-requests", "1", "--max-total-tokens", "6000",
    )  # fmt: skip
    try:
        long = {
            "input_ids": list(range(100, 140)),
            "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True},
        }
        answers: dict[str, httpx.Response] = {}

        def send(name: str) -> None:
            answers[name] = httpx.post(s.url + "/generate", json=long, timeout=120)

        threads = [threading.Thread(target=send, args=(n,)) for n in ("running", "queued")]
        for t in threads:
            t.start()
            time.sleep(0.5)
        refused = httpx.post(s.url + "/generate", json=long, timeout=60)
        body = {"model": "m", "prompt": "one two three", "max_tokens": 4}
        refused_openai = httpx.post(s.url + "/v1/completions", json=body, timeout=60)
        for t in threads:
            t.join()
    finally:
        assert s.stop() == 0
    for r in (refused, refused_openai):
        assert r.status_code == 503, r.text
        err = r.json()
        assert err["object"] == "error" and err["code"] == 503 and err["type"] == "503"
        assert "queue" in err["message"].lower()
    assert answers["running"].status_code == 200 and answers["queued"].status_code == 200
    assert answers["queued"].json()["meta_info"]["completion_tokens"] == 1500
