"""The traffic --confirm sends: a Mooncake trace as a trace workload spec, a capture as its manifest's spec;
a capture whose spec cannot be sent is refused before any work."""

from __future__ import annotations

import json

import pytest

from harness.advise.live_spec import live_spec
from harness.cli import main


def test_a_mooncake_trace_becomes_a_trace_workload_spec_over_the_same_file(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"hash_ids": [1, 2], "input_length": 1024, "output_length": 300, "timestamp": 5}\n')
    live = live_spec(trace, tmp_path / "work", 512, 512)  # full-size blocks: the file as it is
    assert live.spec.workload.path == trace.resolve() and live.spec.name == "advise-t"
    live = live_spec(trace, tmp_path / "work", 32, 512)
    wl = live.spec.workload
    # shrunk 32/512: the answers alike (300 -> 19 tokens), in a copy; the spec keeps the trace's name
    assert (wl.kind, wl.path, wl.format, wl.block_tokens, wl.timestamps) == (
        "trace",
        (tmp_path / "work" / "t-answers-32of512.jsonl").resolve(),
        "mooncake",
        32,
        "ignore",
    )
    assert json.loads(wl.path.read_text())["output_length"] == 19 and live.spec.name == "advise-t"
    assert (
        live.spec.concurrency == 1 and live.spec.api == "sglang-generate" and live.spec.tokenizer == "server"
    )
    assert live.unit_tokens == 32 and live.seed == 0
    assert (tmp_path / "work" / "live-spec.yaml").is_file()


def test_the_live_block_is_the_traces_own_on_a_gpu_and_16_on_cpu_servers() -> None:
    from harness.advise.live_spec import live_block

    gpu = live_block("sglang", 512, None)
    assert (gpu.tokens, gpu.shrunk) == (512, False) and "GPU" in gpu.reason
    for kind in ("sim", "sglang-cpu", "vllm"):
        b = live_block(kind, 512, None)
        assert (
            (b.tokens, b.shrunk) == (16, True) and b.reason.startswith("shrunk from 512") and kind in b.reason
        )
    asked = live_block("sglang", 512, 64)
    assert (asked.tokens, asked.reason) == (64, "--live-block-tokens")


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
