"""The one pipeline every bench entry point shares (sweep/pipeline.py), and bench-vllm's warm re-run
through the sweep's own loop, on the sim: what each step wrote, in which order, on how many servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.capture import POINT, SERVER_INFO, experiment_dir
from harness.capture.manifest import load_manifest
from harness.realserver.vllm_suite import rerun_warm
from harness.sweep.pipeline import after_sweep, run_specs
from harness.sweep.plan import BenchOptions
from tests.helpers.specs import SIM_FAST, TIMEOUTS, shared_prefix, write_spec

pytestmark = pytest.mark.slow  # starts the sim


def _spec(folder: Path) -> Path:
    wl = shared_prefix(prompts_per_group=2, system_prompt_tokens=32, question_tokens=4, output_tokens=4)
    servers = [{"name": "s", "launch": "sim", "args": SIM_FAST}]
    return write_spec(folder, "tiny", wl, tokenizer="word", concurrency=2, seeds=[0, 1], sweep={"groups": [1, 2]},
                      timeouts=TIMEOUTS, servers=servers)  # fmt: skip


def _points(root: Path) -> dict[str, dict]:
    return {
        f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text())
        for p in root.glob(f"*/*/{POINT}")
    }


def test_run_specs_then_after_sweep_then_the_warm_rerun(tmp_path: Path) -> None:
    opts = BenchOptions(node="n", capture=tmp_path / "capture", summaries=tmp_path / "summaries", quiet=True)
    said: list[str] = []
    run = run_specs([_spec(tmp_path)], opts, said.append)
    names = ["groups=1,seed=0", "groups=1,seed=1", "groups=2,seed=0", "groups=2,seed=1"]
    assert run.outcome.statuses == {f"tiny/s/{n}": "ok" for n in names}
    assert [sp.profile.name for p in run.plans for sp in p.servers] == ["s"]

    stages = after_sweep(opts, said.append)
    assert stages.summaries == [tmp_path / "summaries" / "n.json"] and stages.summaries[0].is_file()
    assert tmp_path / "summaries" / "n.md" in stages.reports
    assert len(stages.verdict_lines) == 1 and stages.verdict_lines[0].startswith("validate n: ")
    assert not any(line.startswith("validate") for line in said)  # returned for the caller to print last

    ropts = BenchOptions(node="n-rerun", capture=opts.capture, summaries=opts.summaries, quiet=True)
    rerun_warm(run, ropts, said.append)
    edir = experiment_dir(opts.capture, "n-rerun", "tiny")
    assert load_manifest(edir).get("rerun") is True
    found = _points(edir)
    assert sorted(found) == sorted(f"s-{label}/{n}" for label in ("first", "again") for n in names)
    assert {p["status"] for p in found.values()} == {"ok"} and {p["attempt"] for p in found.values()} == {1}
    # every -first point before every -again point, all on one server (its folder: the profile's name)
    assert max(found[f"s-first/{n}"]["start_wall"] for n in names) < min(
        found[f"s-again/{n}"]["start_wall"] for n in names
    )
    assert [p.parent.name for p in edir.glob(f"*/{SERVER_INFO}")] == ["s"]

    rerun_warm(run, ropts, said.append)  # a second re-run runs every point again: none counts as done
    assert {p["attempt"] for p in _points(edir).values()} == {2}
