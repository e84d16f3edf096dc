"""Run one spec on a real SGLang server and on the sim with the same cache flags, and read both per seed.

The real side attaches `harness run` to a test module's server (its flags are the profile's); the sim side
is `harness bench --server-kind sim` of the same spec, whose only profile carries the same flags. Both are
summarized the same way, so the comparison is of the harness's own figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import specs
from tests.helpers.cli import harness
from tests.real_sglang.conftest import RunningSglang


def write_spec(
    tmp: Path, name: str, workload: dict[str, Any], args: list[str], concurrency: list[int], seeds: list[int]
) -> Path:
    """A concurrency sweep on one SGLang server (`args`), with the sim settings its `--server-kind sim` twin uses."""
    return specs.write_spec(
        tmp, name, workload, api="sglang-generate", tokenizer="server", concurrency=concurrency[0], seeds=seeds,
        sweep={"concurrency": concurrency}, timeouts={"connect": 10, "first_token": 120, "total": 300},
        servers=[{"name": "srv", "launch": "sglang", "args": args}],
        suite={"sim": {"card_profile": "l4-8b", "time_scale": 0.005}},
    )  # fmt: skip


def _harness(*args: str, timeout: int = 900) -> None:
    r = harness(*args, timeout=timeout)
    assert r.returncode in (0, 1), (args, r.stdout[-2000:], r.stderr[-2000:])  # 1: validate flagged a point


def real_run(server: RunningSglang, spec: Path, tmp: Path, node: str) -> dict[str, Any]:
    capture = tmp / "capture"
    _harness(
        "run",
        str(spec),
        "--server-url",
        server.url,
        "--server",
        "srv",
        "--node",
        node,
        "--capture",
        str(capture),
        "--quiet",
        "--server-log",
        str(server.log),
    )
    _harness("summarize", str(capture / node), "-o", str(tmp / "summaries"))
    return json.loads((tmp / "summaries" / f"{node}.json").read_text())


def sim_run(spec: Path, tmp: Path, node: str) -> dict[str, Any]:
    _harness(
        "bench",
        "--spec",
        str(spec),
        "--server-kind",
        "sim",
        "--node",
        node,
        "--capture",
        str(tmp / "capture"),
        "--summaries",
        str(tmp / "summaries"),
        "--quiet",
    )
    return json.loads((tmp / "summaries" / f"{node}.json").read_text())


def per_seed(summary: dict[str, Any], experiment: str) -> dict[str, list[float]]:
    """point key (e.g. concurrency=4) -> the hit rate from usage of each seed, in seed order."""
    out: dict[str, list[float]] = {}
    for p in summary["points"]:
        if p["experiment"] != experiment:
            continue
        assert p["status"] == "ok", p
        seeds = p["seeds"]
        out[p["point_key"]] = [seeds[k]["figures"]["hit_rate_usage"] for k in sorted(seeds)]
    assert out, f"no point of {experiment} in the summary"
    return out


def cached_per_request(capture: Path, node: str, experiment: str, point: str) -> list[int]:
    """Cached tokens of every request of one point folder, in schedule order."""
    req = capture / node / experiment / "srv" / point / "requests.jsonl"
    rows = [json.loads(line) for line in req.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if not r.get("warmup")]
    rows.sort(key=lambda r: r["index"])
    return [int(r.get("cached_tokens") or 0) for r in rows]
