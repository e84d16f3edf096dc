"""`harness advise SPEC --confirm 1 --server-kind sglang-cpu`: the recommended candidate launched on SGLang
0.5.23's own server on this CPU through bench's plan and loop (the module's one server start), the same
spec sent at concurrency 1, and the measured hit rate within 2 points of the prediction."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from tests.helpers import specs
from tests.real_sglang.conftest import SglangSetup

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]


def test_confirm_one_on_real_sglang_measures_within_two_points(sglang_setup: SglangSetup, tmp_path, capsys):
    wl = specs.shared_prefix(
        groups=8, prompts_per_group=3, system_prompt_tokens=192, question_tokens=16, output_tokens=2
    )
    spec = specs.write_spec(
        tmp_path,
        "advise-real",
        wl,
        api="sglang-generate",
        tokenizer="server",
        concurrency=1,
        seeds=[0],
        timeouts={"connect": 10, "first_token": 120, "total": 300},
    )
    out = tmp_path / "out"
    argv = ["advise", str(spec), "--card", "l4", "--pool", "700", "--host-memory", "0", "--workers", "1"]
    argv += ["--confirm", "1", "--server-kind", "sglang-cpu", "--sglang-python", str(sglang_setup.python)]
    argv += ["--server-model", str(sglang_setup.model), "-o", str(out), "--quiet"]
    assert main(argv) == 0
    d = json.loads((out / "advise.json").read_text())
    (c,) = d["confirmed"]
    assert c["server_kind"] == "sglang-cpu"
    assert c["measured_hit_rate"] is not None and c["measured_hit_rate"] > 0.3, c
    assert abs(c["measured_hit_rate"] - c["predicted_hit_rate"]) <= 0.02, c
    # it ran on SGLang's own server with the candidate's pool, not on the sim
    manifest = json.loads((out / "confirm" / "cap" / "advise" / "advise-real" / "manifest.json").read_text())
    argv_run = manifest["servers"]["candidate-1"]["argv"]
    assert argv_run[1:3] == ["-m", "sglang.launch_server"], argv_run
    pool = d["recommendation"]["pool"]
    assert argv_run[argv_run.index("--max-total-tokens") + 1] == str(pool)
    assert "Confirmed live" in (out / "advise.md").read_text()
    capsys.readouterr()
