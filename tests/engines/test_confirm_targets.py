"""What `advise --confirm` reads of each server kind (harness.engines.confirm): the kinds, vLLM's facet."""

from __future__ import annotations

import pytest

from harness.advise.confirm import KINDS
from harness.engines.confirm import CONFIRM_TARGETS, GPU_PACE, SIM_PACE
from harness.engines.vllm.confirm import VLLM_KV_ENV, vllm_env


def test_the_kinds_and_what_each_needs() -> None:
    assert KINDS == ("sim", "sglang", "sglang-cpu", "vllm")
    assert [k for k, t in CONFIRM_TARGETS.items() if t.loads_model] == ["sglang", "sglang-cpu", "vllm"]
    assert [k for k, t in CONFIRM_TARGETS.items() if t.served_name] == ["sim", "vllm"]
    assert [k for k, t in CONFIRM_TARGETS.items() if t.replicas] == ["sim", "sglang", "sglang-cpu"]
    assert {k: t.launch for k, t in CONFIRM_TARGETS.items()} == {
        "sim": "sglang",
        "sglang": "sglang",
        "sglang-cpu": "sglang",
        "vllm": "vllm",
    }
    assert [t.only for t in CONFIRM_TARGETS.values() if t.only] == ["vLLM: lru device pools only"]
    assert CONFIRM_TARGETS["vllm"].block == 32
    assert [k for k, t in CONFIRM_TARGETS.items() if t.cpu_venv] == ["sglang-cpu"]
    assert [k for k, t in CONFIRM_TARGETS.items() if not t.shrunk] == ["sglang"]  # a GPU: full-size prompts
    assert {k: t.pace for k, t in CONFIRM_TARGETS.items() if t.pace} == {"sim": SIM_PACE, "sglang": GPU_PACE}
    assert {k: t.title for k, t in CONFIRM_TARGETS.items() if t.title} == {"sim": "the sim"}


def test_vllm_kv_space_covers_the_pool_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VLLM_KV_ENV, raising=False)
    assert vllm_env(1000, 1) == {VLLM_KV_ENV: "2"}  # 1024 tokens x 128 KiB = 0.125 GiB, + 1
    monkeypatch.setenv(VLLM_KV_ENV, "4")
    assert vllm_env(1000, 1) == {}
