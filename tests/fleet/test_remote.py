"""A fleet unit's body (harness.fleet.remote.run_unit) without Ray: the generator the Ray task wraps, run
here, its batches merged into a driver capture as the driver does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.fleet.config import load_fleet
from harness.fleet.merge import Merger
from harness.fleet.sync import sha256, unpack
from harness.fleet.units import plan_units
from tests.helpers.specs import SIM_FAST, TIMEOUTS, shared_prefix, write_spec


@pytest.mark.slow
def test_a_search_spec_runs_inside_the_units_bench_and_its_probes_come_back(tmp_path: Path) -> None:
    from harness.fleet.remote import run_unit

    spec = write_spec(
        tmp_path,
        "capacity",
        shared_prefix(
            groups=1, prompts_per_group=4, system_prompt_tokens=16, question_tokens=4, output_tokens=4
        ),
        tokenizer="word",
        seeds=[0],
        timeouts=dict(TIMEOUTS),
        # a bound every probe meets: the search doubles 1, 2 and ends at hi (2)
        search={"knob": "concurrency", "lo": 1, "hi": 2, "slo": {"e2e_ms": 60_000}},
        servers=[{"name": "s", "launch": "sim", "args": list(SIM_FAST)}],
    )
    cap = tmp_path / "cap"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"capture: {cap}\nnodes:\n  - name: n\n    specs: [{spec}]\n    server_kind: sim\n")
    (unit,) = plan_units(load_fleet(fleet))
    assert unit.progress(cap) == "search: 0/1 done"
    payload = {
        "node": "n",
        "server": unit.server,
        "server_glob": unit.server_glob(),
        "server_kind": "sim",
        "model": None,
        "bench_args": [],
        "specs": [(spec.name, spec.read_text())],
        "seed": unit.seed_tar(cap),
        "stream_every_s": 0.5,
        "attempt": 1,
    }
    merger, parts, end = Merger(cap, "n", "attempt1"), [], {}
    for msg in run_unit(payload):
        if msg["type"] == "chunk":
            parts.append(msg["data"])
        elif msg["type"] == "batch":
            data, parts = b"".join(parts), []
            assert sha256(data) == msg["sha256"]
            merger.apply(unpack(data))
        elif msg["type"] == "end":
            end = msg
    assert end["exit_code"] == 0, end["tail"]
    assert "search concurrency: best 2" in end["tail"]
    # the probes reached the driver's capture as ordinary points, and the unit counts its search done
    for c in (1, 2):
        point = json.loads(
            (cap / "n" / "capacity" / "s" / f"concurrency={c},seed=0" / "point.json").read_text()
        )
        assert point["status"] == "ok"
    assert unit.progress(cap) == "search: 1/1 done" and unit.complete(cap)
