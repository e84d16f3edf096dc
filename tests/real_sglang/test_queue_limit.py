"""A `--max-queued-requests` abort, on SGLang 0.5.23's own server on this CPU and on the sim launched with the
same flags (one running, one queued): a burst of five finds the queue full, and both answer each refused
request, not streamed, HTTP 503 with the same ErrorResponse on /generate and /v1/completions."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.helpers.procs import SimProc
from tests.real_sglang.conftest import start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]
LIMITS = ["--max-running-requests", "1", "--max-queued-requests", "1", "--max-total-tokens", "1200"]
# long enough (0.7 s on the sim at --time-scale 1, seconds on SGLang's CPU server) that the rest of the burst,
# sent within 80 ms, arrives while the first still runs
ANSWER_TOKENS = 300
LONG = {
    "input_ids": list(range(1000, 1040)),
    "sampling_params": {"max_new_tokens": ANSWER_TOKENS, "ignore_eos": True},
}


def _burst(url: str, model: str) -> list[httpx.Response]:
    """Four long /generate requests and one /v1/completions 20 ms apart, none streamed: one runs, one
    waits in the queue, the rest find it full."""
    answers: list[httpx.Response | None] = [None] * 5

    def send(i: int) -> None:
        if i < 4:
            answers[i] = httpx.post(url + "/generate", json=LONG, timeout=300)
        else:
            body = {"model": model, "prompt": [5, 6, 7], "max_tokens": 2}
            answers[i] = httpx.post(url + "/v1/completions", json=body, timeout=300)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]


def _shape(r: httpx.Response) -> tuple[int, dict]:
    body = r.json()
    return r.status_code, {k: body.get(k) for k in ("object", "message", "type", "param", "code")}


def test_the_sim_answers_a_queue_limit_abort_as_sglang_does(sglang_setup, tmp_path) -> None:
    got: dict[str, list[httpx.Response]] = {}
    for server in start_sglang("queue-limit", LIMITS, sglang_setup, tmp_path / "sglang"):
        model = httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]
        got["sglang"] = _burst(server.url, model)
    (tmp_path / "sim").mkdir()
    sim = SimProc(tmp_path / "sim", "--card-profile", "tiny-test", "--time-scale", "1", *LIMITS)
    try:
        got["sim"] = _burst(sim.url, "sim-model")
    finally:
        assert sim.stop() == 0
    expected = {
        "object": "error",
        "message": "The request queue is full.",
        "type": "503",
        "param": None,
        "code": 503,
    }
    for name, answers in got.items():
        codes = [r.status_code for r in answers]
        assert set(codes) <= {200, 503} and codes.count(503) >= 2 and codes[-1] == 503, (name, codes)
        assert codes[0] == 200  # the first runs
        for r in answers:
            if r.status_code == 503:
                assert _shape(r) == (503, expected), (name, r.text)
            else:
                assert r.json()["meta_info"]["completion_tokens"] == ANSWER_TOKENS, (name, r.text)
