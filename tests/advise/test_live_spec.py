"""The traffic --confirm sends: a Mooncake trace as a trace workload spec, a capture as its manifest's spec;
a capture whose spec cannot be sent is refused before any work."""

from __future__ import annotations

import json

import pytest

from harness.advise.live_spec import live_spec
from harness.cli import main


def test_a_mooncake_trace_becomes_a_trace_workload_spec_over_the_same_file(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"hash_ids": [1, 2], "input_length": 1024, "output_length": 3, "timestamp": 5}\n')
    live = live_spec(trace, tmp_path / "work", 32, 512)
    wl = live.spec.workload
    assert (wl.kind, wl.path, wl.format, wl.block_tokens, wl.timestamps) == (
        "trace",
        trace.resolve(),
        "mooncake",
        32,
        "ignore",
    )
    assert (
        live.spec.concurrency == 1 and live.spec.api == "sglang-generate" and live.spec.tokenizer == "server"
    )
    assert live.unit_tokens == 32 and live.seed == 0
    assert (tmp_path / "work" / "live-spec.yaml").is_file()


def test_a_capture_whose_spec_names_a_missing_trace_is_one_line_before_any_work(
    tmp_path, capsys, monkeypatch
):
    import harness.advise.grid as grid
    from harness.advise.live_spec import trace_spec_dict

    monkeypatch.setattr(grid, "run", lambda *a, **k: pytest.fail("work started on bad input"))
    point = tmp_path / "cap" / "n" / "exp" / "srv" / "c1-s0"
    point.mkdir(parents=True)
    (point / "requests.jsonl").write_text('{"index": 0, "seed": 0, "prompt_tokens": 3, "sent_mono": 1.0}\n')
    spec = trace_spec_dict(tmp_path / "gone.jsonl", 16)
    (tmp_path / "cap" / "n" / "exp" / "manifest.json").write_text(json.dumps({"spec": spec}))
    assert main(["advise", str(point), "--confirm", "1", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "manifest.json" in err and "workload.path" in err, err
    assert "gone.jsonl" in err and not (tmp_path / "o").exists()
