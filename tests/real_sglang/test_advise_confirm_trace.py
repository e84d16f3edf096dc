"""`harness advise TRACE --confirm 1 --confirm-requests N --server-kind sglang-cpu` on the conversation
trace: the advised launch line (its pool scaled to the slice, blocks shrunk to 16 tokens for a CPU pool)
runs on SGLang 0.5.23's own server, and the measured hit rate is within 2 points of the prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from tests.real_sglang.conftest import SglangSetup

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]
TRACE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def test_confirm_a_trace_slice_on_real_sglang(sglang_setup: SglangSetup, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    argv = [
        "advise",
        str(TRACE),
        "--card",
        "h100",
        "--model",
        "llama-3.1-8b-instruct",
        "--host-memory",
        "256",
    ]
    argv += ["--confirm", "1", "--confirm-requests", "30", "--server-kind", "sglang-cpu"]
    argv += ["--sglang-python", str(sglang_setup.python), "--server-model", str(sglang_setup.model)]
    argv += ["-o", str(out), "--quiet"]
    assert main(argv) == 0
    d = json.loads((out / "advise.json").read_text())
    (c,) = d["confirmed"]
    assert c["server_kind"] == "sglang-cpu" and c["status"] == "ok", c
    assert c["measured_hit_rate"] is not None
    assert abs(c["measured_hit_rate"] - c["predicted_hit_rate"]) <= 0.02, c
    block = d["confirm"]["block"]  # shrunk for a CPU pool, and said why
    assert block["block_tokens"] == 16 and block["trace_block_tokens"] == 512 and block["reason"], block
    manifest = next((out / "confirm" / "cap" / "advise").glob("*/manifest.json"))
    argv_run = json.loads(manifest.read_text())["servers"]["candidate-1"]["argv"]
    assert argv_run[1:3] == ["-m", "sglang.launch_server"], argv_run
    assert "--max-total-tokens" in argv_run and "--radix-eviction-policy" in argv_run
    capsys.readouterr()
