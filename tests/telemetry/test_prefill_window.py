"""The prefill-window clock: the SM clock while any request was between send and first token, beside the
busy-median, and which of the two each clock verdict judged (issue 38).

The card here drops its clock only between prefills, as a card may in the decode stretches: the
busy-median then says little about the clock TTFT ran at.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from harness.capture import TELEMETRY, read_jsonl
from harness.cli import main
from harness.summarize.summary import summarize
from harness.telemetry import fake_nvml
from harness.telemetry.sampler import open_sampler
from harness.telemetry.stats import load_point_stats, point_stats, prefill_windows
from harness.verdicts import Thresholds, pair_verdicts, point_verdict
from tests.helpers.summary_capture import T0, build, request, write_point

HIGH, LOW = 1980, 900  # MHz: during a prefill, between prefills


def _req(sent: float, first: float | None, **kw: Any) -> dict[str, Any]:
    return {"sent_mono": sent, "first_token_mono": first, **kw}


def test_prefill_windows_merge_overlaps_and_skip_what_never_prefilled() -> None:
    rows = [
        _req(10.0, 10.5),
        _req(10.2, 10.8),  # overlaps the first: one window
        _req(12.0, 12.1),
        _req(11.0, None),  # no first token: never finished a prefill
        _req(13.0, 13.2, warmup=True),  # warm-up: before the sampler
        _req(14.0, 13.0),  # stamps backwards: not a window
        {"first_token_mono": 15.0},  # never sent
    ]
    assert prefill_windows(rows) == [(10.0, 10.8), (12.0, 12.1)]
    assert prefill_windows([]) == []


def _sample(t: float, mhz: float, util: int = 95, gpu: str = "GPU-a") -> dict[str, Any]:
    return {"kind": "sample", "t_mono": t, "uuid": gpu, "gpu": 0, "sm_clock_mhz": mhz, "gpu_util": util}


def test_point_stats_counts_only_samples_inside_a_window() -> None:
    rows = [_sample(t / 10, HIGH if 10 <= t <= 14 or t == 30 else LOW) for t in range(40)]
    st = point_stats(rows, windows=[(1.0, 1.4), (3.0, 3.0)])
    assert st["n_prefill"] == 6 and st["prefill_median_sm_clock_mhz"] == HIGH
    assert st["busy_median_sm_clock_mhz"] == LOW and st["n_busy"] == 40
    none = point_stats(rows)  # no request records: no prefill window, not a zero one
    assert none["n_prefill"] is None and none["prefill_median_sm_clock_mhz"] is None
    empty = point_stats(rows, windows=[(100.0, 101.0)])
    assert empty["n_prefill"] == 0 and empty["prefill_median_sm_clock_mhz"] is None


def test_the_gpu_slowest_in_the_prefill_window_governs_it() -> None:
    a = [_sample(t / 10, HIGH, gpu="GPU-a") for t in range(20)]
    b = [_sample(t / 10, 1500 if t < 10 else 1000, gpu="GPU-b") for t in range(20)]
    st = point_stats(a + b, windows=[(0.0, 0.5)])
    assert st["prefill_median_sm_clock_mhz"] == 1500 and st["n_prefill"] == 12  # 6 samples on each GPU
    assert st["busy_median_sm_clock_mhz"] == 1250


def _drive(
    tmp_path: Path, drop_between: bool, prefills: int = 6
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The real sampler on fake NVML whose clock is HIGH during each prefill and, when `drop_between`,
    LOW between them; requests stamped as the load generator stamps them (sent, first token)."""
    state = {"mhz": HIGH}
    gpu = fake_nvml.FakeGpu(script={"sm": lambda: state["mhz"]})
    between = LOW if drop_between else HIGH
    requests = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", fake_nvml.make_module([gpu]))
        with open_sampler(tmp_path, gpus=None, interval_s=0.004) as s:
            assert s.status == "ok: 1 GPU"
            for i in range(prefills):
                state["mhz"] = HIGH
                sent = time.monotonic()
                time.sleep(0.06)
                first = time.monotonic()
                state["mhz"] = between
                requests.append({"index": i, "sent_mono": sent, "first_token_mono": first, "ok": True})
                time.sleep(0.12)
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    return load_point_stats(tmp_path), requests


def test_a_clock_that_drops_between_prefills_on_fake_nvml(tmp_path: Path) -> None:
    st, requests = _drive(tmp_path / "drops", drop_between=True)
    rows, _ = read_jsonl(tmp_path / "drops" / TELEMETRY)
    assert st["n_prefill"] >= 6  # a few samples in each 60 ms prefill at 4 ms
    # what the sampler read inside the windows is what the figure says (edges may catch the other clock)
    windows = prefill_windows(requests)
    inside = [
        r["sm_clock_mhz"]
        for r in rows
        if r.get("kind") == "sample" and any(a <= r["t_mono"] <= b for a, b in windows)
    ]
    assert len(inside) == st["n_prefill"] and st["prefill_median_sm_clock_mhz"] == median(inside) == HIGH
    assert st["busy_median_sm_clock_mhz"] == LOW  # two thirds of the run sits between prefills

    # the point: throughput ran below the floor (busy-median), TTFT did not (prefill window), and it says so
    v = point_verdict(st, Thresholds())
    assert v["verdict"] == "below-floor" and v["clock_basis"] == "busy-median" and v["flagged"]
    assert any("prefill-window SM clock 1980 MHz" in r and "above the floor" in r for r in v["reasons"])

    # an A/B pair against a card that held its clock: the TTFT comparison is judged on the prefill
    # window (not confounded); the busy-median ratio is noted for a tok/s comparison, not flagged
    steady, _ = _drive(tmp_path / "steady", drop_between=False)
    a = {"experiment": "e", "server": "a", "sweep": {"g": 1}, "telemetry": st}
    b = {"experiment": "e", "server": "b", "sweep": {"g": 1}, "telemetry": steady}
    (pair,) = pair_verdicts([a, b], Thresholds())
    assert pair["clock_basis"] == "prefill-window" and pair["verdict"] == "ok" and not pair["flagged"]
    assert (pair["clock_a_mhz"], pair["clock_b_mhz"], pair["busy_a_mhz"], pair["busy_b_mhz"]) == (
        HIGH,
        HIGH,
        LOW,
        HIGH,
    )
    assert any("busy-median SM clocks 900 vs 1980" in r and "tok/s" in r for r in pair["reasons"])

    # the same pair judged on the busy-median alone (no request records) is clock-confounded
    bare = [{**p, "telemetry": {**p["telemetry"], "n_prefill": None}} for p in (a, b)]
    (old,) = pair_verdicts(bare, Thresholds())
    assert old["clock_basis"] == "busy-median" and old["verdict"] == "clock-confounded"
    assert any("judged on the busy-median" in r for r in old["reasons"])


def test_a_prefill_window_below_the_floor_flags_the_point_on_that_basis() -> None:
    rows = [_sample(t / 10, 700 if t < 5 else 1900) for t in range(20)]
    v = point_verdict(point_stats(rows, windows=[(0.0, 0.45)]), Thresholds())
    assert v["verdict"] == "prefill-below-floor" and v["clock_basis"] == "prefill-window" and v["flagged"]
    assert "prefill-window SM clock 700 MHz over 5 samples < floor" in v["reasons"][0]
    # too few samples in the window: not judged on it
    few = point_verdict(point_stats(rows, windows=[(0.0, 0.15)]), Thresholds())
    assert few["verdict"] == "ok" and few["clock_basis"] == "busy-median"


def _pattern(windows: list[tuple[float, float]], drop: bool) -> list[dict[str, Any]]:
    head = {"kind": "header", "t_mono": 0.0, "t_wall": T0, "status": "ok: 1 GPU"}
    rows = []
    for i in range(150):
        t = 100.0 + i * 0.02
        inside = any(a <= t <= b for a, b in windows)
        mhz = HIGH if inside or not drop else LOW
        rows.append({**_sample(t, mhz, gpu="GPU-0"), "max_sm_clock_mhz": 1980, "reasons": 0, "temp_c": 60})
    return [head, *rows]


def test_summary_validate_and_the_docs_name_the_prefill_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """summarize puts the prefill-window clock beside the busy-median; validate says which one it judged."""
    root = build(tmp_path / "capture")
    exp = root / "l4" / "gsp"
    for server, drop in (("gpu", True), ("hicache", False)):
        for seed in (0, 1):
            reqs = []
            for k in range(5):
                r = request(k, prompt=100, cached=50, ttft=0.1, group=0, position=k)
                sent = 100.0 + k * 0.5
                r.update(
                    sent_mono=sent,
                    scheduled_mono=sent,
                    first_token_mono=sent + 0.1,
                    first_byte_mono=sent + 0.1,
                )
                reqs.append(r)
            windows = prefill_windows(reqs)
            write_point(
                exp / server,
                {"groups": 4},
                seed,
                reqs,
                start=T0 + 100 * seed,
                telemetry=_pattern(windows, drop),
            )
    s = summarize([root])["l4"].to_json()
    p = {(q["server"], json.dumps(q["sweep"])): q for q in s["points"] if q["experiment"] == "gsp"}
    gpu, hic = p[("gpu", '{"groups": 4}')], p[("hicache", '{"groups": 4}')]
    assert (
        gpu["telemetry"]["prefill_median_sm_clock_mhz"] == HIGH
        and gpu["telemetry"]["busy_median_sm_clock_mhz"] == LOW
    )
    assert gpu["telemetry"]["n_prefill"] == 2 * 5 * 6  # 6 samples (20 ms apart) in each 100 ms window
    assert gpu["seeds"]["0"]["telemetry"]["n_prefill"] == 30
    assert gpu["verdict"]["clock_basis"] == "busy-median" and gpu["verdict"]["verdict"] == "below-floor"
    assert hic["verdict"] == {"verdict": "ok", "reasons": [], "flagged": False, "clock_basis": "busy-median"}
    (pair,) = [x for x in s["pairs"] if x["experiment"] == "gsp" and x["sweep"] == {"groups": 4}]
    assert pair["clock_basis"] == "prefill-window" and pair["verdict"] == "ok"

    path = tmp_path / "summary.json"
    path.write_text(json.dumps(s))
    assert main(["validate", str(path), "--json"]) == 1  # the gpu point is below the floor
    got = json.loads(capsys.readouterr().out)
    row = next(r for r in got["points"] if r["server"] == "gpu" and r["sweep"] == {"groups": 4})
    assert (
        row["prefill_median_sm_clock_mhz"] == HIGH
        and row["n_prefill"] == 60
        and row["clock_basis"] == "busy-median"
    )
    monkeypatch.setenv("COLUMNS", "200")
    main(["validate", str(path)])
    table = capsys.readouterr().out
    assert "prefill" in table and "1980/60" in table

    root_dir = Path(__file__).resolve().parents[2]
    for doc in ("docs/summary.md", "docs/telemetry.md"):
        assert "prefill_median_sm_clock_mhz" in (root_dir / doc).read_text(), doc


def test_bench_samples_at_the_interval_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`harness bench --telemetry-interval-s`: what reaches the sampler (short prefills need a fast one)."""
    from harness.spec.servers import parse_servers
    from harness.sweep.bench import _telemetry_factory

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make_module())
    (prof,) = parse_servers(
        [{"name": "s", "launch": "command", "command": ["srv", "--port", "{port}"]}], None, "x"
    )
    with _telemetry_factory(prof, None, 0.01)(tmp_path) as s:
        assert s.status == "ok: 1 GPU"
    rows, _ = read_jsonl(tmp_path / TELEMETRY)
    assert rows[0]["kind"] == "header" and rows[0]["interval_s"] == 0.01
    # a command started with --device cpu has no GPU to watch, whatever NVML sees
    (cpu,) = parse_servers(
        [{"name": "c", "launch": "command", "command": ["srv", "--device", "cpu", "--port", "{port}"]}],
        None,
        "x",
    )
    with _telemetry_factory(cpu, None, 0.01)(tmp_path / "cpu") as s:
        assert s.status.startswith("no GPU") and "--device cpu" in s.status
    assert main(["bench", "--spec", "nope.yaml", "--telemetry-interval-s", "0"]) == 2
    assert "--telemetry-interval-s 0.0: must be > 0" in capsys.readouterr().err
