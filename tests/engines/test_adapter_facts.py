"""What the rest of the harness asks an engine's adapter instead of its name (issue 46): whether it uses a GPU,
whether bench's --time-scale paces it."""

from __future__ import annotations

from harness.engines import ADAPTERS, named, no_gpu
from harness.spec.servers import ServerProfile
from harness.telemetry.gpus import SIM_REASON


def test_only_the_sim_never_uses_a_gpu() -> None:
    assert {n: a.no_gpu for n, a in ADAPTERS.items() if a.no_gpu} == {"sim": SIM_REASON}


def test_a_profile_runs_the_sim_by_its_launch_or_its_engine() -> None:
    assert no_gpu(ServerProfile("s", "sim")) == SIM_REASON
    assert no_gpu(ServerProfile("c", "command", command=("serve-sim",), engine="sim")) == SIM_REASON
    assert no_gpu(ServerProfile("a", "attach", url="http://h:1", engine="sim")) == SIM_REASON
    assert no_gpu(ServerProfile("g", "sglang")) is None
    assert no_gpu(ServerProfile("v", "vllm")) is None
    assert no_gpu(ServerProfile("c", "command", command=("x",))) is None


def test_named_skips_what_is_no_engine() -> None:
    assert named("sim", "command", None, ["sim"], "attach") == (ADAPTERS["sim"],)
    assert named() == ()


def test_only_the_sim_is_paced_by_the_time_scale() -> None:
    assert [n for n, a in ADAPTERS.items() if a.time_scaled] == ["sim"]


def test_sglang_and_the_sim_are_known_by_their_marks_and_default_to_lru() -> None:
    assert {n: a.default_policy for n, a in ADAPTERS.items() if a.default_policy} == {
        "sglang": "lru",
        "sim": "lru",
    }
    assert ADAPTERS["sim"].marks == ADAPTERS["sglang"].marks
    assert "sglang" in ADAPTERS["sglang"].marks.words
