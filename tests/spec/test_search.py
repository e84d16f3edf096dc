"""The spec's `search:` key: the parsed search, the probes it names, and one line for every bad value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.errors import SpecError
from harness.spec import MultiTurnWorkload, load_spec, point_of
from tests.helpers.cli import harness
from tests.helpers.specs import multi_turn, shared_prefix, spec

SEARCH = {"knob": "concurrency", "lo": 2, "hi": 16, "slo": {"ttft_ms": 500}}


def write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    return p


def test_a_search_parses_names_its_probes_and_lends_its_slo(tmp_path: Path) -> None:
    wl = multi_turn(sessions=4, turns=3, system_prompt_tokens=16, question_tokens=4, answer_tokens=4)
    raw = spec("cap", wl, search={**SEARCH, "knob": "sessions", "slo": {"ttft_ms": 400, "percentile": 99}})
    s = load_spec(write(tmp_path, raw))
    assert s.search is not None and s.search.knob == "sessions" and s.search.integer
    assert (s.search.lo, s.search.hi, s.search.goodput, s.search.percentile) == (2, 16, 0.9, 99)
    assert s.load.slo == {"ttft_ms": 400}  # no top-level slo: the summary's goodput uses the search's bounds
    probe = s.probe_point(12)
    assert probe.sweep == {"sessions": 12} and isinstance(probe.workload, MultiTurnWorkload)
    assert probe.workload.sessions == 12 and probe.concurrency == s.concurrency
    assert point_of(s, {"sessions": 12}) == probe  # a probe's folder is read back as its point
    rate = load_spec(
        write(tmp_path, spec("r", shared_prefix(), search={**SEARCH, "knob": "request_rate", "lo": 0.5}))
    )
    assert rate.probe_point(2.5).request_rate == 2.5 and rate.probe_point(2.5).sweep == {"request_rate": 2.5}


@pytest.mark.parametrize(
    ("search", "key", "words"),
    [
        ({**SEARCH, "lo": 8, "hi": 4}, "search.lo", "expected lo <= hi, got lo 8 > hi 4"),
        (
            {**SEARCH, "slo": {"percentile": 99}},
            "search.slo",
            "expected at least one of ttft_ms, tpot_ms, e2e_ms",
        ),
        ({**SEARCH, "slo": {}}, "search.slo", "expected at least one of"),
        (
            {**SEARCH, "knob": "sessions"},
            "search.knob",
            "sessions: the workload has none (it is shared-prefix",
        ),
        ({**SEARCH, "knob": "groups"}, "search.knob", "expected one of concurrency, request_rate, sessions"),
        ({**SEARCH, "goodput": 1.5}, "search.goodput", "expected a fraction in (0, 1], got 1.5"),
        ({**SEARCH, "slo": {"ttft_ms": -1}}, "search.slo.ttft_ms", "expected a positive number"),
        (
            {**SEARCH, "slo": {"ttft_ms": 5, "percentile": 0}},
            "search.slo.percentile",
            "expected a percentile",
        ),
        ({**SEARCH, "lo": 1.5}, "search.lo", "expected a positive integer, got 1.5"),
        ({k: v for k, v in SEARCH.items() if k != "hi"}, "search.hi", "missing (required)"),
        ({**SEARCH, "step": 2}, "search.step", "unknown key"),
    ],
)
def test_bad_search_is_one_spec_error_naming_file_key_and_value(
    tmp_path: Path, search: dict[str, Any], key: str, words: str
) -> None:
    path = write(tmp_path, spec("cap", shared_prefix(), search=search))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert str(e.value).startswith(f"{path}: {key}: "), str(e.value)
    assert words in str(e.value)


def test_a_search_with_a_sweep_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, spec("cap", shared_prefix(), search=SEARCH, sweep={"groups": [1, 2]}))
    with pytest.raises(SpecError, match=r"search: a search moves one knob; remove sweep \(groups\)"):
        load_spec(path)


@pytest.mark.slow
def test_bad_search_through_the_cli_is_one_line_exit_2_before_any_server(tmp_path: Path) -> None:
    path = write(tmp_path, spec("cap", shared_prefix(), search={**SEARCH, "lo": 8, "hi": 4}))
    for args in (["run", str(path), "--server-url", "http://127.0.0.1:9"], ["bench", "--spec", str(path)]):
        r = harness(*args, "--capture", str(tmp_path / "cap"), cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{path}: search.lo: expected lo <= hi, got lo 8 > hi 4" in lines[0], lines
    assert not (tmp_path / "cap").exists() or not any((tmp_path / "cap").rglob("point.json"))
