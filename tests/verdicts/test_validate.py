"""Verdicts of `harness validate` from hand-built figures, its exit codes, and the sim end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from harness.telemetry.stats import point_stats
from harness.verdicts import (
    Thresholds,
    judge,
    pair_verdicts,
    point_verdict,
    short_reason,
    validate_summary,
    verdict_line,
)
from tests.helpers import cli
from tests.helpers.procs import SimProc

ROOT = Path(__file__).resolve().parents[2]


def _samples(
    clock: float, n: int = 20, reasons: list[int] | None = None, max_sm: float = 1755
) -> list[dict[str, Any]]:
    reasons = reasons or [0] * n
    return [
        {
            "kind": "sample",
            "t_mono": 100.0 + i * 0.2,
            "gpu": 0,
            "uuid": "GPU-x",
            "sm_clock_mhz": clock,
            "gpu_util": 95,
            "reasons": reasons[i],
            "max_sm_clock_mhz": max_sm,
            "temp_c": 70,
        }
        for i in range(n)
    ]


def _point(
    server: str, stats: dict[str, Any] | None, groups: int = 64, experiment: str = "working-set"
) -> dict:
    return {"experiment": experiment, "server": server, "sweep": {"groups": groups}, "telemetry": stats}


# ----------------------------------------------------------------- point verdicts


def test_point_ok() -> None:
    v = point_verdict(point_stats(_samples(1600)), Thresholds())
    assert v == {"verdict": "ok", "reasons": [], "flagged": False, "clock_basis": "busy-median"}


def test_point_below_absolute_and_relative_floor() -> None:
    v = point_verdict(point_stats(_samples(465)), Thresholds())
    assert v["verdict"] == "below-floor" and v["flagged"]
    assert "465 MHz < floor 1316 MHz" in v["reasons"][0]  # 0.75 x 1755 beats the 1,000 MHz floor
    # 1,200 MHz clears the absolute floor but not 0.75 x 1755
    assert point_verdict(point_stats(_samples(1200)))["verdict"] == "below-floor"
    assert point_verdict(point_stats(_samples(1200)), Thresholds(clock_floor_ratio=0.6))["verdict"] == "ok"
    # unknown max clock: only the absolute floor applies
    st = point_stats(_samples(1200, max_sm=None))
    assert (
        point_verdict(st)["verdict"] == "ok"
        and point_verdict(point_stats(_samples(900, max_sm=None)))["flagged"]
    )


def test_point_thermal_beats_below_floor_and_lists_both() -> None:
    st = point_stats(_samples(465, n=10, reasons=[0x20] * 6 + [0] * 4))
    v = point_verdict(st)
    assert v["verdict"] == "thermal" and len(v["reasons"]) == 2 and "60%" in v["reasons"][0]
    # 1 sample in 10 is not over 10%
    assert point_verdict(point_stats(_samples(1600, n=10, reasons=[0x40] + [0] * 9)))["verdict"] == "ok"


def test_point_hw_slowdown_only_when_consecutive() -> None:
    assert point_verdict(point_stats(_samples(1600, n=4, reasons=[0x8, 0, 0x8, 0])))["verdict"] == "ok"
    v = point_verdict(point_stats(_samples(1600, n=4, reasons=[0, 0x8, 0x8, 0])))
    assert v["verdict"] == "hw-slowdown" and v["flagged"]


def test_point_power_brake_and_power_cap_recorded_only() -> None:
    assert point_verdict(point_stats(_samples(1600, n=3, reasons=[0, 0x80, 0])))["verdict"] == "power-brake"
    st = point_stats(_samples(1600, n=4, reasons=[0x4] * 4))
    assert st["power_cap_fraction"] == 1.0 and point_verdict(st)["verdict"] == "ok"


def test_point_no_telemetry_flagged_unless_there_was_no_gpu() -> None:
    sim = point_stats([{"kind": "header", "status": "sim server: no GPU to sample"}])
    assert point_verdict(sim) == {
        "verdict": "no-telemetry",
        "reasons": ["sim server: no GPU to sample"],
        "flagged": False,
        "clock_basis": None,
    }
    lib = point_stats([{"kind": "header", "status": "no NVML: libnvidia-ml.so.1 not found"}])
    assert point_verdict(lib)["verdict"] == "no-telemetry" and point_verdict(lib)["flagged"]
    assert point_verdict(None)["flagged"] and point_verdict({"status": "absent"})["flagged"]


def test_point_without_busy_samples_is_not_judged_on_the_floor() -> None:
    idle = [dict(s, gpu_util=3) for s in _samples(210, n=5)]
    v = point_verdict(point_stats(idle))
    assert v["verdict"] == "ok" and "floor not judged" in v["reasons"][0]


# ----------------------------------------------------------------- pairs


def test_pair_465_vs_765_is_clock_confounded_and_both_below_floor() -> None:
    a, b = _point("gpu-only", point_stats(_samples(465))), _point("hicache", point_stats(_samples(765)))
    pairs = pair_verdicts([a, b], Thresholds())
    assert len(pairs) == 1
    p = pairs[0]
    assert p["verdict"] == "clock-confounded" and p["flagged"]
    assert p["ratio"] == pytest.approx(765 / 465, abs=1e-3) and f"{p['ratio']:.2f}" == "1.65"
    assert (p["a"], p["b"], p["clock_a_mhz"], p["clock_b_mhz"]) == ("gpu-only", "hicache", 465, 765)
    assert "1.65x" in p["reasons"][0]
    assert [point_verdict(x["telemetry"])["verdict"] for x in (a, b)] == ["below-floor", "below-floor"]
    # a looser ratio threshold accepts the pair
    assert pair_verdicts([a, b], Thresholds(max_ab_clock_ratio=1.7))[0]["verdict"] == "ok"


def test_pairs_only_between_servers_at_the_same_sweep_value() -> None:
    pts = [
        _point("a", point_stats(_samples(1600)), groups=4),
        _point("b", point_stats(_samples(1650)), groups=4),
        _point("c", point_stats(_samples(1000)), groups=4),
        _point("a", point_stats(_samples(1600)), groups=16),
        _point("b", point_stats(_samples(1000)), groups=32),
        _point("a", point_stats(_samples(1000)), groups=4, experiment="other"),
    ]
    pairs = pair_verdicts(pts, Thresholds())
    assert [(p["a"], p["b"], p["verdict"]) for p in pairs] == [
        ("a", "b", "ok"),
        ("a", "c", "clock-confounded"),
        ("b", "c", "clock-confounded"),
    ]


def test_pair_without_clock_is_no_telemetry() -> None:
    sim = point_stats([{"kind": "header", "status": "sim server: no GPU to sample"}])
    pairs = pair_verdicts([_point("x", sim), _point("y", sim)])
    assert pairs[0]["verdict"] == "no-telemetry" and not pairs[0]["flagged"]
    pairs = pair_verdicts([_point("x", point_stats(_samples(1600))), _point("y", None)])
    assert pairs[0]["verdict"] == "no-telemetry" and pairs[0]["flagged"]


# ----------------------------------------------------------------- CLI exit codes

_cli = partial(cli.harness, "validate", env={"COLUMNS": "200"}, timeout=60)


def _write(path: Path, points: list[dict[str, Any]], version: Any = 1) -> Path:
    path.write_text(json.dumps({"schema_version": version, "points": points}))
    return path


@pytest.mark.slow
def test_cli_exit_0_when_everything_is_ok(tmp_path: Path) -> None:
    sim = point_stats([{"kind": "header", "status": "sim server: no GPU to sample"}])
    f = _write(
        tmp_path / "ok.json",
        [
            _point("a", point_stats(_samples(1600))),
            _point("b", point_stats(_samples(1620))),
            _point("sim", sim, groups=8),
        ],
    )
    r = _cli(str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    # checked and fine is kept apart from could not check: the sim point is never called trustworthy
    assert "no-telemetry" in r.stdout and "3 checked and fine" in r.stdout
    assert "the 3 checked are trustworthy" in r.stdout and "sim's model of a card" in r.stdout


@pytest.mark.slow
def test_cli_exit_1_when_flagged_table_and_json(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "bad.json",
        [_point("gpu-only", point_stats(_samples(465))), _point("hicache", point_stats(_samples(765)))],
    )
    r = _cli(str(f))
    assert r.returncode == 1
    assert "below-floor" in r.stdout and "clock-confounded" in r.stdout and "1.65" in r.stdout
    r = _cli(str(f), "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert [p["verdict"] for p in out["points"]] == ["below-floor", "below-floor"]
    assert out["pairs"][0]["verdict"] == "clock-confounded" and out["flagged"] == 3 and out["ok"] is False
    # thresholds from the command line change the outcome
    r = _cli(
        str(f), "--json", "--clock-floor-mhz", "400", "--clock-floor-ratio", "0", "--max-ab-clock-ratio", "2"
    )
    assert r.returncode == 0 and json.loads(r.stdout)["thresholds"]["clock_floor_mhz"] == 400


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not JSON: line 1"),
        ('{"points": []}', "not a summary"),
        ('{"schema_version": 7, "points": []}', "schema_version 7 is not supported"),
        ('{"schema_version": 1, "points": {}}', "points: expected a list"),
        ('{"schema_version": 1, "points": [{"server": "a"}]}', "points[0]: missing key 'experiment'"),
        (
            '{"schema_version": 1, "points": [{"server": "a", "experiment": "e", "telemetry": 3}]}',
            "points[0].telemetry",
        ),
        (
            '{"schema_version": 1, "points": [], "verdict_thresholds": {"clock_floor_mhz": "x"}}',
            "verdict_thresholds.clock_floor_mhz: expected a number",
        ),
        (
            '{"schema_version": 1, "points": [], "verdict_thresholds": {"floor": 1}}',
            "verdict_thresholds: unknown key 'floor'",
        ),
        (
            json.dumps(
                {
                    "schema_version": 1,
                    "points": [{"server": "a", "experiment": "e"}],
                    "pairs": [],
                    "verdict_thresholds": asdict(Thresholds()),
                }
            ),
            "points[0].verdict: expected an object",
        ),
    ],
)
def test_cli_exit_2_on_bad_input_with_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    f = tmp_path / "s.json"
    if content is not None:
        f.write_text(content)
    r = _cli(str(f))
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(f) in lines[0], r.stderr


@pytest.mark.slow
def test_cli_rejects_negative_threshold(tmp_path: Path) -> None:
    f = _write(tmp_path / "s.json", [])
    r = _cli(str(f), "--max-thermal-fraction", "-1")
    assert r.returncode == 2 and "--max-thermal-fraction" in r.stderr


def test_validate_summary_accepts_minor_versions() -> None:
    out = validate_summary({"schema_version": "1.2", "points": []})
    assert out["ok"] and out["points"] == [] and out["pairs"] == []


# ----------------------------------------------------------------- verdicts computed once, by summarize


def _summarized(points: list[dict[str, Any]], th: Thresholds | None = None) -> dict[str, Any]:
    """What `harness summarize` writes: each point's verdict, the pairs, and the thresholds they used."""
    th = th or Thresholds()
    for p in points:
        p["verdict"] = point_verdict(p["telemetry"], th)
    pairs = pair_verdicts(points, th)
    return {"schema_version": 1, "points": points, "pairs": pairs, "verdict_thresholds": asdict(th)}


def _a_b() -> list[dict[str, Any]]:
    return [_point("gpu-only", point_stats(_samples(465))), _point("hicache", point_stats(_samples(765)))]


RECOMPUTED = (
    "thresholds differ from the summary's (clock_floor_mhz 1000 → 400, clock_floor_ratio 0.75 → 0, "
    "max_ab_clock_ratio 1.1 → 2): verdicts recomputed"
)
LENIENT = Thresholds(clock_floor_mhz=400, clock_floor_ratio=0, max_ab_clock_ratio=2)


def test_the_summarys_own_thresholds_give_its_stored_verdicts() -> None:
    s = _summarized(_a_b())
    # a stored verdict that recomputing would not give: seen in the output, so nothing was recomputed
    s["points"][0]["verdict"] = {"verdict": "thermal", "reasons": ["as stored"], "flagged": True}
    for th in (None, Thresholds()):
        out = validate_summary(s, th)
        assert out["verdicts"] == "summary" and out["note"] is None
        assert [p["verdict"] for p in out["points"]] == ["thermal", "below-floor"]
        assert out["points"][0]["reasons"] == ["as stored"]
        assert out["pairs"] == s["pairs"] and out["pairs"][0]["verdict"] == "clock-confounded"
        assert out["flagged"] == 3 and out["thresholds"] == asdict(Thresholds())


def test_other_thresholds_recompute_and_say_so() -> None:
    s = _summarized(_a_b())
    out = validate_summary(s, LENIENT)
    assert out["verdicts"] == "recomputed" and out["note"] == RECOMPUTED
    assert [p["verdict"] for p in out["points"]] == ["ok", "ok"] and out["pairs"][0]["verdict"] == "ok"
    assert out["ok"] and s["points"][0]["verdict"]["verdict"] == "below-floor"  # the summary is untouched
    # a summary that records no thresholds (hand-made, or older) is judged afresh, without a note
    del s["verdict_thresholds"]
    out = validate_summary(s)
    assert out["verdicts"] == "recomputed" and out["note"] is None
    assert [p["verdict"] for p in out["points"]] == ["below-floor", "below-floor"]


@pytest.mark.slow
def test_cli_uses_the_summarys_thresholds_unless_told_otherwise(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps(_summarized(_a_b())))
    for extra in ((), ("--clock-floor-mhz", "1000")):  # nothing given, or the summary's own value
        r = _cli(str(f), *extra)
        assert r.returncode == 1 and "recomputed" not in r.stdout and "below-floor" in r.stdout
    args = ("--clock-floor-mhz", "400", "--clock-floor-ratio", "0", "--max-ab-clock-ratio", "2")
    r = _cli(str(f), *args)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == RECOMPUTED, r.stdout
    out = json.loads(_cli(str(f), "--json", *args).stdout)
    assert out["verdicts"] == "recomputed" and out["note"] == RECOMPUTED
    # a summary judged at other thresholds: a flag not given is the summary's, not the default
    f.write_text(json.dumps(_summarized(_a_b(), LENIENT)))
    r = _cli(str(f), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["verdicts"] == "summary" and out["thresholds"]["clock_floor_mhz"] == 400
    r = _cli(str(f), "--json", "--max-ab-clock-ratio", "1.1")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["pairs"][0]["verdict"] == "clock-confounded"
    assert (
        out["note"]
        == "thresholds differ from the summary's (max_ab_clock_ratio 2 → 1.1): verdicts recomputed"
    )


@pytest.mark.slow
def test_fake_nvml_scenario_script_reports_the_confounded_pair(tmp_path: Path) -> None:
    """scripts/validate_example.py drives the real sampler on fake NVML; it produces docs/validate-example.md."""
    out = tmp_path / "example.md"
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "validate_example.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    md = out.read_text()
    assert "clock-confounded" in md and "1.65" in md and "thermal" in md and "$ echo $?\n1" in md


# ----------------------------------------------------------------- end to end against the sim


@pytest.mark.slow
def test_null_sampler_end_to_end_against_the_sim(tmp_path: Path) -> None:
    from harness.capture import experiment_dir
    from harness.capture.manifest import write_manifest
    from harness.capture.redact import spec_redactor
    from harness.engines import ADAPTERS
    from harness.spec import parse_spec
    from harness.summarize.summary import summarize
    from harness.sweep.attach import run_points
    from harness.telemetry.gpus import SIM_REASON, sampling_plan
    from harness.telemetry.sampler import open_sampler

    sim = SimProc(tmp_path, "--time-scale", "0.01", timeout=60.0)
    try:
        base = sim.url
        spec = parse_spec(
            {
                "name": "tel-e2e",
                "api": "openai-chat",
                "model": "default",
                "tokenizer": "word",
                "concurrency": 2,
                "seeds": [0],
                "workload": {
                    "kind": "shared-prefix",
                    "groups": 2,
                    "prompts_per_group": 2,
                    "system_prompt_tokens": 32,
                    "question_tokens": 8,
                    "output_tokens": 4,
                },
            }
        )
        gpus, why = sampling_plan(ADAPTERS["sim"].no_gpu)  # the sim adapter's reason
        write_manifest(
            experiment_dir(tmp_path / "capture", "test", spec.name), spec, "test", spec_redactor([spec])
        )
        recs = run_points(
            spec,
            base_url=base,
            server_name="sim",
            node="test",
            capture_root=tmp_path / "capture",
            telemetry=lambda d: open_sampler(d, gpus=gpus, null_reason=why),
        )
    finally:
        sim.stop()
    assert recs and all(getattr(r, "telemetry_status", None) == SIM_REASON for r in recs)
    tel = list((tmp_path / "capture").rglob("telemetry.jsonl"))
    assert tel and all(json.loads(p.read_text().splitlines()[0])["status"] == SIM_REASON for p in tel)
    assert all(len(p.read_text().splitlines()) == 1 for p in tel)  # the header only: no fake numbers
    summaries = summarize([tmp_path / "capture" / "test"])
    result = validate_summary(next(iter(summaries.values())))
    assert result["ok"] and {p["verdict"] for p in result["points"]} == {"no-telemetry"}


# ----------------------------------------------------------------- the verdict line and short reasons


def _summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema_version": 1, "points": points}


def test_verdict_line_sim_is_unchecked_never_trustworthy() -> None:
    sim = point_stats([{"kind": "header", "status": "sim server: no GPU to sample"}])
    res = validate_summary(_summary([_point("gpu-only", sim), _point("hicache", sim)]))
    line = verdict_line(res)
    assert res["ok"] and res["line"] == line
    assert line.startswith("2 points, 1 pairs: 0 checked and fine, 0 flagged, 3 not checkable")
    assert "trustworthy" not in line and "re-run" not in line
    assert "the sim's model of a card, not a card" in line
    assert [short_reason(r) for r in res["points"]] == ["sim: no GPU", "sim: no GPU"]


def test_verdict_line_no_nvml_advises_no_rerun() -> None:
    lib = point_stats([{"kind": "header", "status": "no NVML: libnvidia-ml.so.1 not found"}])
    res = validate_summary(_summary([_point("llama", lib, groups=4), _point("llama", lib, groups=8)]))
    line = verdict_line(res)
    assert (
        not res["ok"] and "0 checked and fine, 2 flagged, 2 not checkable" in line
    )  # flagged as validate counts
    assert "re-running will not help until NVML can see it" in line and "re-run the" not in line
    assert "if it used none, there were no clocks to check" in line  # a CPU server: nothing to re-run
    assert "no NVML library" in line and short_reason(res["points"][0]) == "no NVML library"


def test_verdict_line_clock_problems_advise_a_rerun_with_their_causes() -> None:
    res = validate_summary(
        _summary(
            [_point("gpu-only", point_stats(_samples(465))), _point("hicache", point_stats(_samples(765)))]
        )
    )
    line = verdict_line(res)
    assert "3 flagged" in line and "re-run the flagged points (below-floor, clock-confounded" in line
    assert "trustworthy" not in line
    assert short_reason(res["points"][0]) == "SM 465 < 1316 MHz"
    assert short_reason(res["pairs"][0]) == "clocks 1.65x apart"


def test_verdict_line_warm_cache_is_a_rerun_and_shown_in_the_reason() -> None:
    p = _point("a", point_stats(_samples(1600)))
    p["cache_state"] = "warm-start"
    res = validate_summary(_summary([p]))
    assert "1 flagged" in res["line"] and "re-run the flagged points (warm-start" in res["line"]
    assert short_reason(res["points"][0]) == "clocks ok, warm-start"


def test_verdict_line_rerun_names_only_what_a_rerun_changes() -> None:
    """A warm-start point with no NVML: re-running fixes the warm cache, never the missing telemetry."""
    lib = point_stats([{"kind": "header", "status": "no NVML: libnvidia-ml.so.1 not found"}])
    p = _point("vllm", lib)
    p["cache_state"] = "warm-start"
    line = validate_summary(_summary([p]))["line"]
    assert "re-run the flagged points (warm-start: a re-run can change these)" in line, line
    assert "no-telemetry, warm-start" not in line


def test_verdict_line_all_checked_is_trustworthy() -> None:
    res = validate_summary(
        _summary([_point("a", point_stats(_samples(1600))), _point("b", point_stats(_samples(1620)))])
    )
    assert (
        res["line"]
        == "2 points, 1 pairs: 3 checked and fine, 0 flagged, 0 not checkable: timings trustworthy"
    )


def test_validate_table_fits_80_columns(tmp_path: Path) -> None:
    import io

    from harness.commands import validate as cmd

    sim = point_stats([{"kind": "header", "status": "sim server: no GPU to sample"}])
    pts = [_point(f"server-{i}", sim, groups=g) for i in range(3) for g in (64, 4, 16)]
    pts.append(_point("gpu", point_stats(_samples(465)), groups=4))
    res = judge(_summary(pts))
    buf = io.StringIO()
    cmd.print_tables(res, "t.json", width=80, file=buf)
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "sim: no GPU" in out and "SM 465 < 1316" in out
    lines = [line for line in out.splitlines() if "server-0" in line]
    assert [line.split()[1] for line in lines][:3] == ["groups=4", "groups=16", "groups=64"]
