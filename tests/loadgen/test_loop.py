"""The event loop a load run drives: uvloop by default where installed, asyncio on request, one clear error
for anything else, and the same records on either loop."""

from __future__ import annotations

import asyncio
import sys

import pytest

from harness.capture import read_jsonl
from harness.errors import HarnessError
from harness.loadgen import loop
from harness.loadgen.run import RunIds, run_schedule
from harness.spec import parse_spec
from harness.workloads import build_schedule
from tests.helpers.loadrun import answer_facts


async def _loop_type() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(loop.ENV, raising=False)
    assert loop.loop_name() == "uvloop"
    assert loop.run(_loop_type()).startswith("uvloop")


def test_harness_loop_asyncio_keeps_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop.ENV, "asyncio")
    assert loop.loop_name() == "asyncio"
    assert loop.run(_loop_type()).startswith("asyncio")


def test_without_uvloop_the_standard_loop_runs_and_asking_for_it_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    monkeypatch.delenv(loop.ENV, raising=False)
    assert loop.loop_name() == "asyncio"
    assert loop.run(_loop_type()).startswith("asyncio")
    monkeypatch.setenv(loop.ENV, "uvloop")
    with pytest.raises(HarnessError, match="HARNESS_LOOP=uvloop, but uvloop is not installed"):
        loop.run(_loop_type())


def test_an_unknown_loop_names_the_variable_and_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop.ENV, "trio")
    with pytest.raises(HarnessError, match=r"HARNESS_LOOP='trio': expected uvloop, asyncio or auto"):
        loop.run(_loop_type())


@pytest.mark.slow
def test_both_loops_record_the_same_facts(fake_server_factory, tmp_path, monkeypatch) -> None:
    pytest.importorskip("uvloop")
    wl = {"kind": "shared-prefix", "groups": 3, "prompts_per_group": 3, "system_prompt_tokens": 20,
          "question_tokens": 4, "output_tokens": 4}  # fmt: skip
    schedule = build_schedule(parse_spec({"name": "t", "model": "m", "workload": wl}), None, 3)
    got = {}
    for name in ("uvloop", "asyncio"):  # a fresh server each, one request at a time: the same answers
        monkeypatch.setenv(loop.ENV, name)
        srv = fake_server_factory("--itl-ms", "1")
        out = tmp_path / f"{name}.jsonl"
        res = loop.run(
            run_schedule(schedule, base_url=srv.url, api="openai-chat", model="m", concurrency=1, out_path=out,
                         ids=RunIds("t", "fake", "p", 0))
        )  # fmt: skip
        rows, bad = read_jsonl(out)
        assert res.ok == 9 and bad == 0 and len(rows) == 9
        assert all(
            r["sent_mono"] <= r["first_byte_mono"] <= r["first_token_mono"] <= r["done_mono"] for r in rows
        )
        assert all(len(r["token_mono"]) == r["completion_tokens"] == 4 for r in rows)
        got[name] = answer_facts(rows)
    assert got["uvloop"] == got["asyncio"]
