"""Predicted vs measured for a `tokenizer: server` point against a live serve-sim (issue 23 item 5).

The harness launches the sim itself (a real process, its port chosen at run time); at concurrency 1 the
sim is exact, so the replay of the ids sent must predict the measured hit rate to the token.
Slow: it starts processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import harness

pytestmark = pytest.mark.slow


def test_server_tokenizer_point_is_predicted_exactly(tmp_path: Path) -> None:
    spec = {
        "name": "ids-multiturn",
        "model": "m",
        "api": "sglang-generate",
        "tokenizer": "server",
        "concurrency": 1,
        "seeds": [0],
        "workload": {
            "kind": "multi-turn",
            "sessions": 6,
            "turns": 3,
            "system_prompt_tokens": 40,
            "question_tokens": 8,
            "answer_tokens": 12,
        },
        # a pool shorter than the sessions' histories: eviction decides the hits, not just the prefixes
        "servers": [
            {"name": "small", "launch": "sim", "args": ["--max-total-tokens", "450", "--enable-cache-report"]}
        ],
        "suite": {"sim": {"time_scale": 0.01}},
        "timeouts": {"connect": 5, "first_token": 30, "total": 60},
    }
    path = tmp_path / "ids.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    r = harness("bench", "--spec", str(path), "--server-kind", "sim", "--node", "n", "--capture",
                str(tmp_path / "cap"), "--summaries", str(tmp_path / "sum"), "--quiet", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [
        json.loads(line)
        for line in (tmp_path / "cap" / "n" / "ids-multiturn" / "small" / "seed=0" / "requests.jsonl")
        .read_text()
        .splitlines()
    ]
    assert len(rows) == 18 and all(r["ok"] and r["answer_ids"] for r in rows)
    (p,) = json.loads((tmp_path / "sum" / "n.json").read_text())["points"]
    assert p["prediction"]["why_none"] is None, p["prediction"]
    measured = sum(r["cached_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows)
    assert 0.05 < measured < p["ideal_hit_rate"] - 0.05, (measured, p)  # some hits; the pool did bind
    assert p["measured_hit_rate"] == pytest.approx(measured)
    assert p["predicted_hit_rate"] == pytest.approx(p["measured_hit_rate"], abs=1e-9)
    assert p["prediction"]["diff_points"] == pytest.approx(0.0, abs=1e-7)
