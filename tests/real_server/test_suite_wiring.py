"""run_real's wiring (bench path → summary → checks → report) against the scripted fake server: no build needed.

The fake speaks llama.cpp's final-chunk `timings`; the real server is exercised in test_llama_server.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.realserver import suite
from tests.helpers.procs import FAKESERVER
from tests.helpers.specs import write_spec

pytestmark = [pytest.mark.real_server, pytest.mark.slow]  # no build needed


def _spec(tmp_path: Path, name: str, workload: dict) -> Path:
    command = [sys.executable, str(FAKESERVER), "--port", "{port}", "--timings", "--ttft-ms", "5"]
    server = {
        "name": "fake-llama",
        "launch": "command",
        "engine": "llama.cpp",
        "command": command,
        "ready_timeout_s": 60,
    }
    return write_spec(
        tmp_path, name, workload, model="tiny", tokenizer="word", concurrency=2, servers=[server]
    )


def test_run_real_writes_summary_checks_and_report(tmp_path, monkeypatch):
    import harness.realserver.model as model
    import harness.realserver.prepare as prepare

    fake_bin = SimpleNamespace(binary=Path("/fake/llama-server"), reused=True, build_seconds=420.0)
    monkeypatch.setattr(prepare, "prepare_server", lambda log=None: fake_bin)
    monkeypatch.setattr(model, "make_model", lambda log=None: None)
    specs = [
        _spec(
            tmp_path,
            "fake-groups",
            {"kind": "shared-prefix", "groups": 2, "prompts_per_group": 4, "system_prompt_tokens": 200}
            | {"question_tokens": 10, "output_tokens": 4},
        ),
        _spec(
            tmp_path,
            "fake-chat",
            {"kind": "multi-turn", "sessions": 2, "turns": 3, "system_prompt_tokens": 100}
            | {"question_tokens": 10, "answer_tokens": 4},
        ),
    ]
    run = suite.run_real(
        specs,
        node="fake-node",
        capture=tmp_path / "capture",
        summaries=tmp_path / "summaries",
        log=lambda m: None,
    )
    assert run.problems == []
    assert sorted(run.checks) == ["fake-chat/fake-llama/seed=0", "fake-groups/fake-llama/seed=0"]
    summary = json.loads((tmp_path / "summaries" / "fake-node.json").read_text())
    real = summary["real_server"]
    assert real["build_seconds"] == 420.0 and real["build_reused"] is True
    for key, c in run.checks.items():
        assert c.ok == c.requests == c.with_timings > 0
        assert c.gap_ms_min is not None and c.gap_ms_min >= 3.0  # 5 ms TTFT vs 1 ms prompt_ms
        assert real["checks"][key]["hit_rate_usage_summary"] == c.hit_rate_timings
        assert c.hit_rate_usage_later > c.hit_rate_usage_first
    report = (tmp_path / "summaries" / "fake-node.md").read_text()
    assert "## Real server checks" in report and "fake-groups/fake-llama/seed=0" in report
