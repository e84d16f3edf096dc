"""--confirm at the input's load (TTFT and SLO attainment, predicted beside measured on the sim's modelled
clock) and --confirm-capacity (bench's capacity search on the recommendation against the slice's predicted
capacity)."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.advise.confirm_capacity import search_dict
from harness.advise.confirm_load import live_trace, spec_load, timing
from harness.advise.confirm_rows import table
from harness.advise.load import Load
from harness.advise.slice_capacity import Knob, knob_of
from harness.advise.slo import DEFAULT_SLO, parse_slo
from harness.cli import main
from harness.errors import SpecError
from harness.spec import load_spec
from harness.whatif.trace import Trace, TraceRequest


def _timed(path, n=40, gap_ms=100, blocks=8):
    """Six conversations whose turns come back one block longer, a request every `gap_ms`."""
    lines = []
    for i in range(n):
        s, turn = i % 6, i // 6
        ids = [s * 1000 + b for b in range(blocks + turn)]
        lines.append(
            {"hash_ids": ids, "input_length": len(ids) * 512, "output_length": 64, "timestamp": i * gap_ms}
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_the_live_spec_sends_at_each_kind_of_load():
    top, wl = spec_load(Load("trace", speedup=4.0), 600)
    assert top == {"concurrency": 600} and wl == {"timestamps": "honor", "speedup": 4.0}
    top, wl = spec_load(Load("rate", rate=2.5), 10)
    assert top == {"concurrency": 10, "request_rate": 2.5} and wl == {"timestamps": "ignore"}
    top, wl = spec_load(Load("concurrency", concurrency=8), 600)
    assert top == {"concurrency": 8} and wl == {"timestamps": "ignore"}


def test_the_prediction_is_of_the_trace_as_sent_at_sixteen_tokens_a_block():
    t = Trace("t", [TraceRequest((1, 2, 3), 1500, 0.0, 500), TraceRequest((1, 4), 600, 1.0, 10)], unit=512,
              kind="blocks")  # fmt: skip
    a, b = live_trace(t, 16).requests
    assert (a.tokens, a.output_tokens, b.tokens, b.output_tokens) == (47, 16, 19, 1)  # ceil(x 16/512), >= 1
    assert a.key == tuple(range(16, 63)) and b.key[:16] == a.key[:16] and b.key[16:] == tuple(range(64, 67))
    assert a.output_key == tuple(range(80, 96)) and b.output_key == (96,)  # the answers: new ids, cached
    assert live_trace(t, 16).unit == 1 and live_trace(t, 512) is t


def test_timing_counts_an_unanswered_request_as_missing_the_slo():
    got = timing([0.1, 0.2, float("nan"), 3.0], parse_slo("ttft_ms=1000"))
    assert got.attainment == 0.5 and got.requests == 4
    assert got.ttft_ms["p50"] == pytest.approx(200.0) and got.ttft_ms["mean"] == pytest.approx(1100.0)


def test_the_live_search_brackets_the_predicted_knob_with_the_slos_ttft_bound():
    knob = Knob("speedup", 1.0, 600, 200.0)
    s = search_dict(knob, 13.5, DEFAULT_SLO)
    assert s == {"knob": "speedup", "lo": 4.5, "hi": 40.5, "slo": {"ttft_ms": 2000.0, "percentile": 90.0},
                 "goodput": 0.9}  # fmt: skip
    assert knob.rps(13.5) == pytest.approx(600 * 13.5 / 200.0)
    c = search_dict(Knob("concurrency", 4, 600, 0.0), 10, parse_slo("ttft_p99_ms=500,tpot_ms=50"))
    assert (c["lo"], c["hi"], c["goodput"]) == (3, 30, 0.99)
    assert c["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0, "percentile": 99.0}


def test_the_knob_follows_the_load():
    t = Trace("t", [TraceRequest((1,), 1, float(i)) for i in range(5)], unit=1)
    assert knob_of(Load("trace", speedup=2.0), t) == Knob("speedup", 2.0, 5, 4.0)
    assert knob_of(Load("rate", rate=3.0), t).name == "request_rate"
    assert knob_of(Load("concurrency", concurrency=4), t).base == 4.0


def test_benchs_search_takes_a_speedup_knob_on_a_trace_only(tmp_path):
    trace = _timed(tmp_path / "t.jsonl", n=6)
    base = {"name": "s", "api": "sglang-generate", "model": "m", "tokenizer": "server", "concurrency": 6,
            "workload": {"kind": "trace", "path": str(trace), "format": "mooncake", "block_tokens": 16}}  # fmt: skip
    search = {"knob": "speedup", "lo": 0.5, "hi": 8, "slo": {"ttft_ms": 2000, "percentile": 90}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(base | {"search": search}))
    spec = load_spec(tmp_path / "a.yaml")
    assert spec.search is not None and not spec.search.integer
    assert spec.probe_point(2.5).workload.speedup == 2.5
    other = base | {"workload": {"kind": "shared-prefix", "groups": 1, "prompts_per_group": 2,
                                 "system_prompt_tokens": 8, "question_tokens": 8, "output_tokens": 1}}  # fmt: skip
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(other | {"search": search}))
    with pytest.raises(SpecError, match="search.knob.*speedup"):
        load_spec(tmp_path / "b.yaml")


def test_the_confirm_table_shows_ttft_and_attainment_only_at_a_load():
    row = {"config": "c", "status": "ok", "ttft_ms": {"predicted": {"p90": 321.3}, "measured": {"p90": 378.2}},
           "slo_attainment": {"predicted": 1.0, "measured": 0.995}}  # fmt: skip
    head, rows = table([row], lambda r: [r["config"]])
    assert head[-4:] == ["TTFT p90 ms predicted", "measured", "SLO attainment predicted", "measured"]
    assert rows == [["c", "321", "378", "100.0%", "99.5%"]]
    head, rows = table([{"config": "c"}], lambda r: [r["config"]])
    assert "TTFT p90 ms predicted" not in head and rows == [["c"]]


@pytest.mark.slow  # starts a sim server
def test_confirm_at_the_traces_own_times_measures_ttft_beside_the_prediction(tmp_path, capsys):
    trace = _timed(tmp_path / "conv.jsonl")
    out = tmp_path / "out"
    argv = ["advise", str(trace), "--card", "l4", "--pool", "40", "--host-memory", "64", "--workers", "1"]
    assert main([*argv, "--confirm", "1", "--speedup", "2", "-o", str(out), "--quiet"]) == 0
    d = json.loads((out / "advise.json").read_text())
    (c,) = d["confirmed"]
    live = yaml.safe_load((out / "confirm" / "live-spec.yaml").read_text())
    assert live["workload"]["timestamps"] == "honor" and live["workload"]["speedup"] == 2.0
    assert live["concurrency"] == 40
    assert c["load"].startswith("the trace's arrival times / --speedup 2")
    assert abs(c["measured_hit_rate"] - c["predicted_hit_rate"]) <= 0.02, c
    p, m = c["ttft_ms"]["predicted"], c["ttft_ms"]["measured"]
    assert p["p90"] > 0 and 0.9 <= m["p90"] / p["p90"] <= 1.1, c  # the sim's modelled clock, not wall time
    assert c["slo_attainment"] == {"predicted": 1.0, "measured": 1.0}
    assert "TTFT p90 ms predicted" in (out / "advise.md").read_text()
    capsys.readouterr()


@pytest.mark.slow  # starts a sim server for each probe of bench's search
def test_confirm_capacity_runs_benchs_search_around_the_predicted_capacity(tmp_path, capsys):
    trace = _timed(tmp_path / "conv.jsonl", n=60, gap_ms=100, blocks=64)  # predicted: speedup ~5
    out = tmp_path / "out"
    argv = ["advise", str(trace), "--card", "h100", "--model", "llama-3.1-8b-instruct", "--pool", "200"]
    rc = main(
        [*argv, "--confirm", "1", "--confirm-capacity", "--slo", "ttft_p90_ms=200", "-o", str(out), "--quiet"]
    )
    assert rc == 0
    d = json.loads((out / "advise.json").read_text())
    cap = d["confirm_capacity"]
    assert cap["knob"] == "speedup" and cap["slo"] == "TTFT p90 <= 200 ms"
    assert cap["predicted_rps"] > 0 and cap["probes"], cap
    assert cap["measured_rps"] is not None and 0.8 <= cap["ratio"] <= 1.2, cap
    assert any(p["status"] != "pass" for p in cap["probes"]), cap  # the search found the ceiling
    assert "bench's search over speedup" in (out / "advise.md").read_text()
    capsys.readouterr()


def test_a_trace_sent_at_its_own_times_takes_at_least_its_span():
    from harness.advise.confirm import _span

    t = Trace("t", [TraceRequest((1,), 1, float(i)) for i in range(11)], unit=1)
    assert _span(t, Load("trace", speedup=2.0)) == 5.0
    assert _span(t, Load("concurrency", concurrency=4)) == 0.0 and _span(None, Load("trace")) == 0.0


def test_a_predicted_probe_is_judged_as_benchs_search_judges_a_live_one():
    from harness.advise.slice_capacity import as_bench_judges

    slo = parse_slo("ttft_p90_ms=200")
    assert as_bench_judges(slo, [0.1] * 9 + [0.5])  # 90 % within 200 ms, the linear p90 is 140 ms
    assert not as_bench_judges(slo, [0.1] * 8 + [0.5, float("nan")])  # a request with no answer misses
    assert not as_bench_judges(slo, [float("nan")] * 3)
