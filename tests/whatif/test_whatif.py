"""`harness whatif`: trace reading, the ideal column, the drop-reasoning diagnostic, the command."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace, TraceRequest, read_mooncake
from harness.whatif.replay import diagnose, ideal_hits, replay, sweep
from tests.helpers.cli import harness


def write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}'


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not JSON"),
        ('{"input_length": 5}', "hash_ids: expected a list of integers"),
        ('{"hash_ids": [1, "x"]}', "hash_ids"),
        ('{"hash_ids": [1, true]}', "hash_ids"),
        ('{"hash_ids": [1, 2.0]}', "hash_ids"),
        ('{"hash_ids": [1], "input_length": -3}', "input_length"),
        ("[1, 2]", "expected a JSON object"),
        ('{"hash_ids": [1], "timestamp": "soon"}', "timestamp"),
    ],
)
def test_mooncake_reader_names_the_bad_line(tmp_path, bad, message):
    p = write(tmp_path, [GOOD, GOOD, bad])
    with pytest.raises(HarnessError, match=rf"trace.jsonl:3: .*{message}"):
        read_mooncake(p)


def test_mooncake_reader_keeps_arrival_order_and_refuses_a_timestamp_out_of_it(tmp_path):
    """Issue 58: a slice and a live replay send the file in its order, so a request listed after a later
    one is refused (naming both lines), not sorted silently; equal timestamps keep the file's order."""
    p = write(
        tmp_path,
        [
            '{"timestamp": 100, "input_length": 512, "hash_ids": [1]}',
            '{"timestamp": 100, "input_length": 600, "hash_ids": [1, 2]}',
        ],
    )
    t = read_mooncake(p)
    assert [r.key for r in t.requests] == [(1,), (1, 2)]
    assert t.hit_tokens(t.requests[1], 2) == 600 and t.hit_tokens(t.requests[1], 1) == 512
    p = write(tmp_path, [GOOD, '{"timestamp": 500, "hash_ids": [1]}', '{"timestamp": 100, "hash_ids": [3]}'])
    with pytest.raises(HarnessError, match=r"trace.jsonl:3: timestamp: 100 ms is before line 2's 500 ms;"):
        read_mooncake(p)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"input_length": 100000, "hash_ids": [1]}', "input_length: 100000 tokens with 1 hash_ids of 512"),
        ('{"input_length": 512, "hash_ids": [1, 2]}', r"input_length: 512 tokens .* expected 513\.\.1024"),
        ('{"input_length": 3, "hash_ids": []}', r"input_length: 3 tokens with 0 hash_ids .* expected 0\.\.0"),
    ],
)
def test_mooncake_reader_refuses_an_input_length_its_hash_ids_cannot_hold(tmp_path, line, message):
    """Issue 58: every hash id a full block of --block-size tokens but the last, which may be partial."""
    with pytest.raises(HarnessError, match=rf"trace.jsonl:2: {message}"):
        read_mooncake(write(tmp_path, [GOOD, line]))
    edges = ['{"input_length": 513, "hash_ids": [1, 2]}', '{"input_length": 1024, "hash_ids": [1, 2]}']
    assert [r.tokens for r in read_mooncake(write(tmp_path, edges)).requests] == [513, 1024]


def brute_force_ideal(keys: list[tuple], page: int) -> list[int]:
    out = []
    for i, k in enumerate(keys):
        best = 0
        for prev in keys[:i]:
            n = 0
            while n < min(len(k), len(prev)) and k[n] == prev[n]:
                n += 1
            best = max(best, n)
        out.append(max(min(best, len(k) - 1), 0) // page * page)
    return out


@pytest.mark.parametrize("page", [1, 3])
@pytest.mark.parametrize("seed", range(5))
def test_ideal_equals_brute_force(seed, page):
    rng = random.Random(seed)
    keys: list[tuple] = []
    for _ in range(40):
        base = list(rng.choice(keys)) if keys and rng.random() < 0.7 else []
        base = base[: rng.randrange(len(base) + 1)]
        keys.append(tuple(base + [rng.randrange(4) for _ in range(rng.randrange(0, 8))]))
    trace = Trace("t", [TraceRequest(k, len(k)) for k in keys])
    assert ideal_hits(trace, page) == brute_force_ideal(keys, page)


def test_unbounded_pool_reaches_the_ideal():
    rng = random.Random(7)
    keys = [tuple([1, 2, 3] + [rng.randrange(50) for _ in range(rng.randrange(1, 6))]) for _ in range(60)]
    trace = Trace("t", [TraceRequest(k, len(k)) for k in keys])
    r = replay(trace, Config("lru", pool=10_000))
    assert r.hit_tokens == r.ideal_hit_tokens > 0
    small = replay(trace, Config("lru", pool=12))
    assert small.hit_tokens < r.hit_tokens


def _session(drop_reasoning: bool) -> Trace:
    """Two sessions, three turns; answers are reasoning (100..) + final (200..)."""
    reqs = []
    for s in range(2):
        history: list[int] = [900 + s] * 5  # system prompt
        for t in range(3):
            q = [300 + 10 * s + t] * 4
            prompt = tuple(history + q)
            think = [100 + 10 * s + t] * 6
            final = [200 + 10 * s + t] * 3
            reqs.append(TraceRequest(prompt, len(prompt), session=s, turn=t, output_key=tuple(think + final)))
            history = list(prompt) + (final if drop_reasoning else think + final)
    return Trace("s", reqs)


def test_drop_reasoning_ceiling_and_diagnostic():
    verbatim, dropped = _session(False), _session(True)
    iv, idr = ideal_hits(verbatim), ideal_hits(dropped)
    # verbatim: each later turn matches its whole history; dropped: only up to the previous prompt
    for r, i in zip(verbatim.requests, iv, strict=True):
        assert i == (len(r.key) - 4 - 1 if r.turn else 0)  # the answer's last token is not cached
    prev: dict[int, int] = {}
    for r, i in zip(dropped.requests, idr, strict=True):
        assert i == prev.get(r.session, 0)
        prev[r.session] = len(r.key)
    assert diagnose(verbatim, iv) == []
    notes = diagnose(dropped, idr)
    assert len(notes) == 1 and "where the previous answer starts" in notes[0] and "reasoning" in notes[0]


def test_sweep_runs_configurations_in_processes():
    keys = [tuple([i % 5] * 3 + [i]) for i in range(200)]
    trace = Trace("t", [TraceRequest(k, len(k)) for k in keys])
    cfgs = [Config(p, pool) for p in ("lru", "lfu") for pool in (8, 64)] + [Config("lru", 8, host_ratio=4)]
    got = sweep(trace, cfgs, workers=2)
    serial = [replay(trace, c) for c in cfgs]
    assert [r.hit_tokens for r in got] == [r.hit_tokens for r in serial]
    assert got[-1].host_hit_tokens >= 0 and got[-1].config.host_ratio == 4


@pytest.mark.slow
def test_command_prints_table_json_and_chart(tmp_path):
    p = write(
        tmp_path,
        [
            json.dumps({"timestamp": i, "input_length": 1536, "hash_ids": [0, 1 + i % 3, 10 + i]})
            for i in range(30)
        ],
    )
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "whatif",
            str(p),
            "--policy",
            "lru,lfu",
            "--pool",
            "4,50",
            "--json",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    res = data[0]["results"]
    assert len(res) == 4 and all(0 <= x["hit_rate"] <= x["ideal_hit_rate"] for x in res)
    assert (out / "whatif-trace.png").stat().st_size > 0 and (out / "whatif.json").exists()
    bad = write(tmp_path, [GOOD, "{oops"])
    r = harness("whatif", str(bad), "--pool", "4")
    assert r.returncode == 2 and "trace.jsonl:2" in r.stderr and "Traceback" not in r.stderr


def test_capture_folder_replays_with_the_answers_received(tmp_path):
    import yaml

    from harness.spec import load_spec
    from harness.whatif.inputs import read_capture
    from harness.workloads import build_schedule

    spec_path = Path(__file__).resolve().parents[2] / "workloads" / "eviction-multiturn.yaml"
    raw = yaml.safe_load(spec_path.read_text())
    raw["workload"].update(sessions=3, turns=3)
    raw.pop("matrix", None)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(raw))
    spec = load_spec(spec_file)
    schedule = build_schedule(spec, None, 0, "word")
    exp = tmp_path / "capture" / "node" / spec.name
    point = exp / "srv" / "seed=0"
    point.mkdir(parents=True)
    (exp / "manifest.json").write_text(json.dumps({"spec": raw}))
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta"]
    lines = []
    for i, r in enumerate(schedule.requests()):
        answer = " ".join(rng.choice(words) for _ in range(rng.randrange(3, 9)))
        lines.append(json.dumps({"index": r.index, "seed": 0, "sent_mono": float(i), "answer": answer}))
    (point / "requests.jsonl").write_text("\n".join(lines) + "\n")
    trace = read_capture(point)
    assert len(trace.requests) == len(schedule)
    ideal = ideal_hits(trace)
    prev: dict[int, TraceRequest] = {}
    for r, i in zip(trace.requests, ideal, strict=True):
        if r.session in prev:  # the history carries the captured answer verbatim
            p = prev[r.session]
            assert r.key[: len(p.key) + len(p.output_key)] == p.key + p.output_key
            assert i == len(p.key) + len(p.output_key) - 1  # all but the answer's last token
        prev[r.session] = r
    assert diagnose(trace, ideal) == []


POOL = 600  # tokens: the 6 sessions end with ~920 tokens of history


def _small_multiturn(tmp_path: Path, concurrency: int) -> Path:
    """A multi-turn spec whose sessions outgrow a POOL-token pool, so eviction decides the hits."""
    import yaml

    spec = {
        "name": f"whatif-live-c{concurrency}",
        "api": "openai-chat",
        "model": "default",
        "tokenizer": "word",
        "concurrency": concurrency,
        "seeds": [0],
        "workload": {
            "kind": "multi-turn",
            "sessions": 6,
            "turns": 4,
            "system_prompt_tokens": 40,
            "question_tokens": 8,
            "answer_tokens": 16,
        },
        "timeouts": {"connect": 5, "first_token": 30, "total": 60},
    }
    path = tmp_path / f"spec-c{concurrency}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _live_cached(
    tmp_path: Path, spec_path: Path, policy: str, pool: int, time_scale: float = 0.05
) -> dict[int, int]:
    """Cached tokens per schedule index from a real `harness serve-sim` run through harness.sweep."""
    from harness.capture import read_jsonl
    from harness.spec import load_spec
    from harness.sweep.attach import run_points
    from tests.helpers.procs import SimProc

    spec = load_spec(spec_path)
    srv = SimProc(
        tmp_path,
        "--radix-eviction-policy",
        policy,
        "--max-total-tokens",
        str(pool),
        "--card-profile",
        "tiny-test",
        "--time-scale",
        str(time_scale),
        "--enable-cache-report",
    )
    try:
        info = json.loads(
            subprocess.run(
                [sys.executable, "-c", f"import httpx;print(httpx.get('{srv.url}/get_server_info').text)"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
        )
        assert info["sim_radix_tree"] == "unified"
        cap = tmp_path / "cap"
        rec = run_points(spec, base_url=srv.url, server_name="sim", node="n", capture_root=cap)[0]
        assert rec.status == "ok"
        rows, bad = read_jsonl(cap / "n" / spec.name / "sim" / "seed=0" / "requests.jsonl")
    finally:
        srv.stop()
    assert bad == 0 and all(r["ok"] for r in rows)
    return {r["index"]: r["cached_tokens"] or 0 for r in rows}  # SGLang omits cached_tokens when 0


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_replay_equals_live_sim_request_for_request(tmp_path, policy):
    """Same engine, virtual vs real clock: with concurrency 1 the order is fixed, so every request's
    cached tokens in the replay equal what the live serve-sim reported."""
    from harness.whatif.inputs import read_spec

    spec_path = _small_multiturn(tmp_path, 1)
    live = _live_cached(tmp_path, spec_path, policy, POOL)
    trace = read_spec(spec_path)
    assert trace.concurrency == 1
    r = replay(trace, Config(policy, POOL), card="tiny-test")
    assert r.replay == "engine"
    replayed = {req.index: c for req, c in zip(trace.requests, r.cached_per_request, strict=True)}
    assert replayed == live
    assert r.evicted_tokens > 0 and 0 < r.hit_tokens < r.ideal_hit_tokens  # the pool did bind
    # the sequential path (no scheduler) decides the same hits at concurrency 1
    seq = replay(dataclasses.replace(trace, concurrency=None), Config(policy, POOL), card="tiny-test")
    assert seq.cached_per_request == r.cached_per_request


@pytest.mark.slow
@pytest.mark.parametrize("pool", [600, 800])
def test_replay_equals_live_sim_with_concurrency(tmp_path, pool):
    """With 4 requests in flight the live run's batches used to depend on when each HTTP request landed;
    the load generator's lockstep header (harness.sim.lockstep) makes the live sim's virtual clock wait
    for the requests the loop owes it, so at --time-scale 0.02 (where a wall millisecond used to be 50
    modelled ones) every request's cached tokens equal the replay's, even at the thrashing edge (600)."""
    from harness.whatif.inputs import read_spec

    spec_path = _small_multiturn(tmp_path, 4)
    live = _live_cached(tmp_path, spec_path, "lru", pool, time_scale=0.02)
    trace = read_spec(spec_path)
    r = replay(trace, Config("lru", pool), card="tiny-test")
    replayed = {req.index: c for req, c in zip(trace.requests, r.cached_per_request, strict=True)}
    assert replayed == live
    assert r.evicted_tokens > 0
    assert r.concurrency == 4 and set(r.per_position) == {0, 1, 2, 3}


def test_engine_replay_closed_loop_and_positions():
    """Closed loop: a session's turn t+1 never arrives before its turn t finished; per-position tallies."""
    reqs = []
    for s in range(3):
        hist: tuple = (500 + s,) * 6
        for t in range(3):
            key = hist + (600 + 10 * s + t,) * 3
            ans = (700 + 10 * s + t,) * 4
            reqs.append(
                TraceRequest(
                    key,
                    len(key),
                    session=s,
                    turn=t,
                    output_key=ans,
                    position=t,
                    index=t * 3 + s,
                    conversation=s,
                )
            )
            hist = key + ans
    reqs.sort(key=lambda r: r.index)
    trace = Trace("c", reqs, concurrency=2)
    r = replay(trace, Config("lru", 10_000), card="tiny-test")
    assert r.replay == "engine" and r.requests == 9
    assert set(r.per_position) == {0, 1, 2}
    h, i, p = r.per_position[0]
    assert h == 0 and p == sum(x.tokens for x in reqs if x.turn == 0)
    # unbounded pool: later turns hit their whole history but the answer's last token (the ideal)
    for pos in (1, 2):
        h, i, p = r.per_position[pos]
        assert h == i > 0


def test_tables_number_turns_from_1_with_units_and_bare_o_writes_an_ignored_folder(
    tmp_path, capsys, monkeypatch
):
    from harness.cli import main

    spec = Path(__file__).resolve().parents[2] / "workloads" / "eviction-multiturn.yaml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["whatif", str(spec), "--policy", "lru", "--pool", "8192", "--workers", "1", "-o"]) == 0
    out = capsys.readouterr().out
    assert "turn 1" in out and "turn 6" in out and "turn 7" not in out and " t0 " not in out
    assert "evicted" in out and "tokens" in out and "hit %" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert (tmp_path / "whatif-out" / "whatif.json").exists()
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "whatif-out/whatif.json"],
        cwd=Path(__file__).resolve().parents[2],
    )
    assert ignored.returncode == 0  # git ignores the default output folder
