"""--server-kind sglang without SGLang installed: refused for a run, planned for a dry run (which only prints
the launch lines) with a line saying SGLang is missing."""

from __future__ import annotations

import importlib.util

import pytest

from harness.errors import HarnessError
from harness.servers.kind import SGLANG_CHECKED, choose_kind

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here: nothing is missing"
)


def test_a_run_is_refused_and_a_dry_run_says_sglang_is_missing() -> None:
    with pytest.raises(HarnessError, match="--server-kind sglang: import sglang failed"):
        choose_kind("sglang")
    kind, why = choose_kind("sglang", dry_run=True)
    assert kind == "sglang" and "SGLang is missing here" in why and f"sglang=={SGLANG_CHECKED}" in why


def test_bench_dry_run_prints_every_launch_line_without_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.commands.bench import DRY_RUN_MODEL, build_parser, run

    assert run(build_parser("bench").parse_args(["--dry-run", "--server-kind", "sglang"])) == 0
    out = capsys.readouterr().out
    assert "SGLang is missing here" in out
    lines = [ln for ln in out.splitlines() if "[sglang]:" in ln]
    assert len(lines) >= 10 and all(
        f"-m sglang.launch_server --model-path {DRY_RUN_MODEL}" in ln for ln in lines
    )
