"""Each --fault-* flag of serve-sim, against a real process on 127.0.0.1 (issue 8, item 1)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.helpers.procs import SimProc

pytestmark = pytest.mark.slow  # every test here starts a process

FAST = ("--card-profile", "tiny-test", "--time-scale", "0.05")
BODY = {"text": "baba dada fafa gaga", "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}


def gen(url: str, **kw) -> httpx.Response:
    return httpx.post(url + "/generate", json={**BODY, **kw}, timeout=10)


def stream_events(url: str) -> tuple[list[str], float, Exception | None]:
    """SSE data payloads of one streamed /generate, the longest gap between them, and any transport error."""
    events: list[str] = []
    gap, last, err = 0.0, time.monotonic(), None
    try:
        with httpx.stream("POST", url + "/generate", json={**BODY, "stream": True}, timeout=10) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    now = time.monotonic()
                    gap, last = max(gap, now - last) if events else 0.0, now
                    events.append(line[6:])
    except httpx.HTTPError as e:
        err = e
    return events, gap, err


@pytest.fixture
def sim(tmp_path, request):
    procs: list[SimProc] = []

    def start(*args: str, **kw) -> SimProc:
        p = SimProc(tmp_path / str(len(procs)), *FAST, *args, **kw)
        procs.append(p)
        return p

    (tmp_path / "0").mkdir()
    for i in range(1, 4):
        (tmp_path / str(i)).mkdir()
    yield start
    for p in procs:
        p.stop()


def test_crash_after_n_requests(sim):
    s = sim("--fault-crash-after", "2")
    assert gen(s.url).status_code == 200 and gen(s.url).status_code == 200
    with pytest.raises(httpx.HTTPError):
        gen(s.url)
    assert s.proc.wait(10) == 1


@pytest.mark.parametrize("code", [500, 503])
def test_http_errors(sim, code):
    s = sim(f"--fault-http-{code}", "1.0")
    r = gen(s.url)
    assert r.status_code == code and r.json()["code"] == code
    assert httpx.get(s.url + "/health").status_code == 200  # control endpoints unaffected


def test_error_fraction_is_seeded(sim):
    a = sim("--fault-http-500", "0.5", "--fault-seed", "7")
    b = sim("--fault-http-500", "0.5", "--fault-seed", "7")
    pa = [gen(a.url).status_code for _ in range(12)]
    pb = [gen(b.url).status_code for _ in range(12)]
    assert pa == pb and 500 in pa and 200 in pa


def test_stall_mid_stream(sim):
    s = sim("--fault-stall", "1.0", "--fault-stall-seconds", "0.6")
    events, gap, err = stream_events(s.url)
    assert err is None and events[-1] == "[DONE]"
    assert gap >= 0.55  # tokens made during the stall arrive together afterwards
    assert len(json.loads(events[-2])["output_ids"]) == 8


def test_malformed_sse_event(sim):
    s = sim("--fault-malformed-sse", "1.0")
    events, _, err = stream_events(s.url)
    assert err is None and events[-1] == "[DONE]"
    bad = 0
    for e in events[:-1]:
        try:
            json.loads(e)
        except json.JSONDecodeError:
            bad += 1
    assert bad == 1


def test_drop_connection_mid_stream(sim):
    s = sim("--fault-drop", "1.0")
    events, _, err = stream_events(s.url)
    assert "[DONE]" not in events and 0 < len(events) < 9
    assert err is not None or len(events) < 9
    # the server survives and its engine released the aborted request
    assert httpx.get(s.url + "/health").status_code == 200
    time.sleep(0.2)
    assert httpx.post(s.url + "/flush_cache").status_code == 200


def test_refuse_flush_n_times(sim):
    s = sim("--fault-refuse-flush", "2")
    codes = [httpx.post(s.url + "/flush_cache").status_code for _ in range(3)]
    assert codes == [400, 400, 200]


def test_ready_after_delay(sim):
    s = sim("--fault-ready-delay", "1.0", wait_ready=False)
    assert httpx.get(s.url + "/health").status_code == 503
    assert gen(s.url).status_code == 503
    assert "ready to roll" not in s.log()
    s.wait_ready(10)
    assert "ready to roll" in s.log()
    assert gen(s.url).status_code == 200


def test_never_ready(sim):
    s = sim("--fault-ready-delay", "-1", wait_ready=False)
    time.sleep(0.3)
    assert httpx.get(s.url + "/health").status_code == 503
    assert "ready to roll" not in s.log()


def test_health_stops_answering(sim):
    s = sim("--fault-health-stop-after", "0.8")
    assert httpx.get(s.url + "/health", timeout=2).status_code == 200
    time.sleep(1.0)
    with pytest.raises(httpx.TimeoutException):
        httpx.get(s.url + "/health", timeout=0.5)
    assert gen(s.url).status_code == 200  # generation still works: only health hangs
