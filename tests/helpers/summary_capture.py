"""A small capture built by hand for the summarize/report tests, with figures easy to work out."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.capture import point_name, write_json_atomic

T0 = datetime(2026, 10, 17, 18, 0, 0).timestamp()  # local time, as SGLang stamps its log


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("[%Y-%m-%d %H:%M:%S]")


def prefill(t: float, new: int, cached: int) -> str:
    return (
        f"{stamp(t)} Prefill batch, #new-seq: 1, #new-token: {new}, #cached-token: {cached}, token usage: 0.10, "
        f"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 100.00"
    )


def request(
    i: int,
    *,
    prompt: int,
    cached: int | None,
    ttft: float,
    ok: bool = True,
    turn: int | None = None,
    position: int | None = None,
    group: int | None = None,
    session: int | None = None,
    done: float = 2.0,
    completion: int = 10,
    timings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A RequestRecord dict: scheduled at mono 100, done at 100 + done, tokens 10 ms then 20 ms apart.

    `timings` is what llama.cpp puts in its final chunk (`server_timings`: cache_n, prompt_n, prompt_ms).
    """
    first = 100.0 + ttft
    return {
        "experiment": "x",
        "server": "s",
        "point": "p",
        "seed": 0,
        "index": i,
        "group": group,
        "session": session,
        "turn": turn,
        "position": position,
        "api": "openai-chat",
        "scheduled_mono": 100.0,
        "sent_mono": 100.0,
        "first_byte_mono": first,
        "first_token_mono": first,
        "done_mono": 100.0 + done,
        "start_wall": T0,
        "token_mono": [first, first + 0.01, first + 0.03] if ok else [],
        "ttft_s": ttft if ok else None,
        "e2e_s": done if ok else None,
        "prompt_tokens": prompt if ok else None,
        "completion_tokens": completion if ok else None,
        "cached_tokens": cached,
        "ok": ok,
        "error_kind": None if ok else "timeout-total",
        "server_timings": timings,
    }


def prom(prompt: float, cached: dict[str, float] | None) -> str:
    lines = [
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{model_name="m"}} {prompt}',
    ]
    lines.append("# TYPE sglang:cached_tokens_total counter")
    for src, v in (cached or {}).items():
        lines.append(f'sglang:cached_tokens_total{{cache_source="{src}",model_name="m"}} {v}')
    return "\n".join(lines) + "\n"


def write_point(
    server_dir: Path,
    sweep: dict[str, Any],
    seed: int,
    requests: list[dict[str, Any]],
    *,
    start: float,
    status: str = "ok",
    before: str | None = None,
    after: str | None = None,
    telemetry: list[dict[str, Any]] | None = None,
    telemetry_status: str = "sim server: no GPU",
) -> Path:
    d = server_dir / point_name(sweep, seed)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "requests.jsonl", "w") as f:
        for r in requests:
            f.write(json.dumps({**r, "seed": seed}) + "\n")
    if before is not None:
        (d / "metrics-before.prom").write_text(before)
    if after is not None:
        (d / "metrics-after.prom").write_text(after)
    if telemetry is not None:
        with open(d / "telemetry.jsonl", "w") as f:
            for s in telemetry:
                f.write(json.dumps(s) + "\n")
    n_ok = sum(r["ok"] for r in requests)
    write_json_atomic(
        d / "point.json",
        {
            "experiment": "x",
            "server": server_dir.name,
            "point": d.name,
            "seed": seed,
            "sweep": sweep,
            "status": status,
            "requests_scheduled": len(requests),
            "requests_ok": n_ok,
            "requests_failed": len(requests) - n_ok,
            "errors": {},
            "start_mono": 99.0,
            "end_mono": 110.0,
            "start_wall": start,
            "end_wall": start + 10,
            "flushed": True,
            "telemetry_status": "ok" if telemetry else telemetry_status,
        },
    )
    return d


def clock_samples(n: int, mhz: float) -> list[dict[str, Any]]:
    head = {"kind": "header", "t_mono": 0.0, "t_wall": T0, "status": "ok: 1 GPU"}
    return [head] + [
        {
            "kind": "sample",
            "t_mono": 100.0 + i * 0.2,
            "t_wall": T0 + i * 0.2,
            "gpu": 0,
            "uuid": "GPU-0",
            "sm_clock_mhz": mhz + (i % 2) * 10,
            "max_sm_clock_mhz": 2040,
            "gpu_util": 90,
            "reasons": 0,
            "temp_c": 60,
        }
        for i in range(n)
    ]


def build(root: Path, node: str = "l4") -> Path:
    """capture/<node>/gsp (shared-prefix A/B, groups 1 and 4, seeds 0-1) and capture/<node>/mt (multi-turn)."""
    exp = root / node / "gsp"
    exp.mkdir(parents=True)
    write_json_atomic(
        exp / "manifest.json",
        {
            "experiment": "gsp",
            "node": node,
            "spec": {  # as write_manifest keeps it: the spec file as written (summarize parses it again)
                "name": "gsp",
                "model": "m",
                "workload": {
                    "kind": "shared-prefix",
                    "groups": 4,
                    "prompts_per_group": 4,
                    "system_prompt_tokens": 80,
                    "question_tokens": 20,
                    "output_tokens": 8,
                },
                "sweep": {"groups": [1, 4]},
            },
            "servers": {
                "gpu": {"args": ["--max-total-tokens", "4096"]},
                "hicache": {"args": ["--max-total-tokens", "4096", "--enable-hierarchical-cache"]},
            },
        },
    )
    gpu = exp / "gpu"
    gpu.mkdir()
    log = [
        f"{stamp(T0 - 60)} KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, K size: 0.10 GB, V size: 0.10 GB",
        f"{stamp(T0 - 59)} max_total_num_tokens=4096, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, context_len=8192, available_gpu_mem=1.00 GB",
        f"{stamp(T0 - 58)} The server is fired up and ready to roll!",
        # groups=4 seed 0, window [T0, T0+10]: 200 new + 200 cached = 0.5
        prefill(T0 + 1, 100, 0),
        prefill(T0 + 2, 20, 80),
        prefill(T0 + 3, 20, 80),
        prefill(T0 + 4, 60, 40),
        'INFO:     127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        # groups=4 seed 1, window [T0+20, T0+30]: 130 new + 270 cached = 0.675
        prefill(T0 + 21, 100, 0),
        prefill(T0 + 22, 10, 90),
        prefill(T0 + 23, 10, 90),
        prefill(T0 + 24, 10, 90),
        # groups=1 seed 0, window [T0+40, T0+50]: 100 new + 300 cached = 0.75
        prefill(T0 + 41, 100, 0),
        prefill(T0 + 42, 0, 100),
        prefill(T0 + 43, 0, 100),
        prefill(T0 + 44, 0, 100),
    ]
    (gpu / "server.log").write_text("\n".join(log) + "\n")
    g4 = {"groups": 4}
    # seed 0: cached None (SGLang's null for zero), 80, 80, 40 of 100 each → 200/400 = 0.5
    write_point(
        gpu,
        g4,
        0,
        [
            request(0, prompt=100, cached=None, ttft=0.1, group=0, position=0),
            request(1, prompt=100, cached=80, ttft=0.2, group=0, position=1),
            request(2, prompt=100, cached=80, ttft=0.3, group=0, position=2),
            request(3, prompt=100, cached=40, ttft=0.4, group=1, position=0),
        ],
        start=T0,
        before=prom(0, None),
        after=prom(400, {"device": 150, "host": 50}),
        telemetry=clock_samples(20, 1800),
    )
    # seed 1: 0, 90, 90, 90 → 270/400 = 0.675; counters say 200/400 = 0.5 → sources disagree
    write_point(
        gpu,
        g4,
        1,
        [
            request(0, prompt=100, cached=None, ttft=0.2, group=0, position=0),
            request(1, prompt=100, cached=90, ttft=0.3, group=0, position=1),
            request(2, prompt=100, cached=90, ttft=0.4, group=0, position=2),
            request(3, prompt=100, cached=90, ttft=0.5, group=0, position=3),
        ],
        start=T0 + 20,
        before=prom(1000, {"device": 10}),
        after=prom(1400, {"device": 210}),
        telemetry=clock_samples(10, 1900),
    )
    write_point(
        gpu,
        {"groups": 1},
        0,
        [
            request(i, prompt=100, cached=None if i == 0 else 100, ttft=0.05 * (i + 1), group=0, position=i)
            for i in range(4)
        ],
        start=T0 + 40,
    )
    hic = exp / "hicache"
    hic.mkdir()
    (hic / "server.log").write_text(
        f"{stamp(T0 - 60)} KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, K size: 0.10 GB, V size: 0.10 GB\n"
        f"{stamp(T0 - 60)} Allocating kv hierarchical KV host pool: 8192 tokens, 0.20 GB host memory.\n"
    )
    write_point(
        hic,
        g4,
        0,
        [request(i, prompt=100, cached=50, ttft=0.1, group=0, position=i) for i in range(4)],
        start=T0 + 100,
    )
    # seed 1 partial: one request failed; its figures are kept but not in the median
    write_point(
        hic,
        g4,
        1,
        [
            request(0, prompt=100, cached=50, ttft=9.0, group=0, position=0),
            request(1, prompt=100, cached=None, ttft=0, ok=False),
        ],
        start=T0 + 120,
        status="partial",
    )
    # a point whose requests.jsonl was cut by kill -9 and which never wrote point.json
    cut = hic / "groups=1,seed=0"
    cut.mkdir()
    (cut / "requests.jsonl").write_text(
        json.dumps(request(0, prompt=100, cached=None, ttft=0.5)) + '\n{"experiment": "x", "ser'
    )

    mt = root / node / "mt"
    mt.mkdir(parents=True)
    write_json_atomic(
        mt / "manifest.json",
        {
            "experiment": "mt",
            "node": node,
            "spec": {
                "name": "mt",
                "model": "m",
                "workload": {
                    "kind": "multi-turn",
                    "sessions": 2,
                    "turns": 3,
                    "system_prompt_tokens": 40,
                    "question_tokens": 10,
                    "answer_tokens": 8,
                },
            },
            "servers": [
                {"name": "lru", "args": ["--radix-eviction-policy", "lru", "--max-total-tokens", "2048"]},
                {"name": "lfu", "args": ["--radix-eviction-policy=lfu", "--max-total-tokens", "2048"]},
            ],
        },
    )
    for name, last in (("lru", 100), ("lfu", 140)):
        sd = mt / name
        sd.mkdir()
        # two sessions x three turns: prompts 50, 100, 150; cached None, 50, `last`
        reqs = []
        for s in range(2):
            for t, (p, c) in enumerate(((50, None), (100, 50), (150, last))):
                reqs.append(request(len(reqs), prompt=p, cached=c, ttft=0.1 * (t + 1), session=s, turn=t))
        write_point(sd, {}, 0, reqs, start=T0 + 200)
    return root
