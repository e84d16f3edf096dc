"""`harness advise` through its CLI entry (in process): the three outputs and their keys, and bad input
as one line naming the culprit, exit 2, before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main


def _trace(tmp_path: Path) -> Path:
    """Sessions of growing block prefixes, a few minutes apart: enough reuse to draw a curve."""
    lines = []
    for i in range(60):
        s = i % 6
        blocks = [1000 * s + b for b in range(3 + i // 6)]
        lines.append(
            json.dumps({"timestamp": i * 20_000, "input_length": len(blocks) * 16, "hash_ids": blocks})
        )
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_writes_markdown_html_and_json_with_the_issue_keys(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "advise",
            str(_trace(tmp_path)),
            "--card",
            "l4",
            "--block-size",
            "16",
            "--pool",
            "20",
            "--curve-at",
            "7,33",
            "--slo",
            "ttft_ms=200,tpot_ms=50",
            "--workers",
            "1",
            "-o",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    head = capsys.readouterr().out.strip()
    d = json.loads((out / "advise.json").read_text())
    assert d["recommendation"]["headline"] == head
    assert {"curve", "working_set", "candidates", "recommendation"} <= set(d)
    pools = [p["pool"] for p in d["curve"]]
    assert {7, 20, 33} <= set(pools)
    assert all(0 <= p["hit_rate"] <= 1 for p in d["curve"])
    # the named sizes also replayed exactly: equal to the one pass on this trace (sessions only extend)
    named = [p for p in d["curve"] if "replayed_hit_rate" in p]
    assert {7, 20, 33} <= {p["pool"] for p in named}
    assert all(p["replayed_hit_rate"] == p["hit_rate"] for p in named if p["pool"] >= 20)
    assert set(d["recommendation"]) >= {"hicache", "policy", "pool", "host_ratio", "steps"}
    c = d["candidates"][0]
    assert set(c) >= {"policy", "pool", "host_ratio", "write_policy", "predicted_hit_rate", "modelled"}
    assert c["modelled"]["ttft_ms"]["p50"] > 0 and c["modelled"]["goodput_rps"] is not None
    assert len(d["candidates"]) >= 40
    policies = {c["policy"] for c in d["candidates"]}
    assert policies == {"lru", "lfu", "slru", "tlru"}
    assert set(d["working_set"]["within"]) == {"1m", "5m", "15m"}
    assert d["breakeven"]["host"][0]["load_pays"] in (True, False)
    page = (out / "advise.html").read_text()
    assert (
        "<svg" in page
        and "current 20" in page
        and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    )
    assert "Content-Security-Policy" in page
    md = (out / "advise.md").read_text()
    assert md.startswith("# Advice for") and "| 20 (current)" in md


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl"], "missing.jsonl: no such file or folder"),
        (["T", "--card", "v100"], "--card: unknown card 'v100'"),
        (["T", "--pool", "0"], "--pool: 0 must be positive"),
        (["T", "--model", "gpt-9"], "--model: 'gpt-9' is neither a folder with a config.json nor a built-in"),
        (["T", "--slo", "ttft=5"], "--slo: 'ttft=5': expected ttft_ms=N, tpot_ms=N or a percentile form"),
        (["T", "--slo", "ttft_ms=fast"], "--slo: ttft_ms: bad value 'fast'"),
        (["T", "--curve-at", "10,x"], "--curve-at: bad value 'x'"),
        (["T", "--confirm", "-1"], "--confirm: -1 must be >= 0"),
        (
            ["T", "--confirm", "1", "--server-kind", "sglang-cpu"],
            "--server-model: --server-kind sglang-cpu loads",
        ),
        (
            ["T", "--confirm", "1", "--server-kind", "sglang", "--server-model", "/nope/m"],
            "--server-model: /nope/m: no such",
        ),
        (["T", "--confirm", "1", "--live-block-tokens", "0"], "--live-block-tokens: 0 must be positive"),
        (["T", "--confirm", "1", "--confirm-time-limit", "0"], "--confirm-time-limit: 0 must be a positive"),
        (
            ["T", "--confirm", "1", "--confirm-time-limit", "nan"],
            "--confirm-time-limit: nan must be a positive",
        ),
        (["BAD"], "bad.jsonl:2: hash_ids: expected a list of integers, got 'x'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, message):
    import harness.advise.grid as grid

    monkeypatch.setattr(grid, "run", lambda *a, **k: pytest.fail("work started on bad input"))
    trace = _trace(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hash_ids": [1]}\n{"hash_ids": "x"}\n')
    argv = [
        str(trace)
        if a == "T"
        else str(bad)
        if a == "BAD"
        else str(tmp_path / a)
        if a.endswith(".jsonl")
        else a
        for a in args
    ]
    assert main(["advise", *argv, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "o").exists()
