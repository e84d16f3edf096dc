"""Cold-cache honesty: a point whose cache was not reset, or whose reset did not take, is flagged everywhere.

The integration tests run `harness run` against tests/helpers/stdlib_cache_server.py (standard library only),
whose /flush_cache either empties the cache (control), answers success and does nothing, or is absent.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from harness.verdicts.cold import HEAD_SLACK, cache_state, first_requests, worst_state
from tests.helpers import cli
from tests.helpers.procs import STDLIB_CACHE_SERVER, ScriptServer
from tests.helpers.specs import shared_prefix, write_spec

_harness = partial(cli.harness, timeout=180)


def row(i: int, pos: int, cached: int | None, prompt: int = 558, group: int = 0) -> dict:
    return {
        "index": i,
        "ok": True,
        "position": pos,
        "group": group,
        "cached_tokens": cached,
        "prompt_tokens": prompt,
    }


def test_first_request_finding_its_prefix_cached_is_not_cold() -> None:
    # issue 20's warm re-run on vLLM: the first prompt of every group hit 512 of its 558 tokens
    rows = [row(0, 0, 512), row(1, 1, 512), row(2, 0, 512, group=1), row(3, 1, 544, group=1)]
    check = first_requests(rows, block_tokens=32)
    assert check.checked == 2 and not check.cold and check.allowance == 32
    assert check.over[0] == {"unit": "group 0", "index": 0, "cached": 512, "prompt": 558}
    assert check.describe() == (
        "2 of 2 groups/sessions found more than 32 tokens cached even on their first request "
        "(up to 512 of 558, request 0)"
    )
    st = cache_state({"flushed": True}, rows, 32)
    assert st["state"] == "cache-not-cold" and list(st["flags"]) == ["cache-not-cold"]


def test_the_request_served_first_counts_not_the_one_scheduled_first() -> None:
    # concurrency 2: position 1 reached the server first and warmed the prefix for position 0
    rows = [row(1, 1, 0), row(0, 0, 512), row(2, 2, 512)]
    assert first_requests(rows, block_tokens=32).cold
    sessions = [{**row(i, t, c), "group": None, "session": 0} for i, (t, c) in enumerate([(0, 0), (1, 300)])]
    assert first_requests(sessions, 16).cold and first_requests(sessions, 16).checked == 1


def test_trace_conversations_may_share_prefixes_and_are_not_judged() -> None:
    rows = [row(0, 0, 512), row(1, 0, 512, group=1)]  # two sessions of a log behind one system prompt
    assert cache_state({"flushed": True}, rows, 32, "shared-prefix")["state"] == "cache-not-cold"
    trace = cache_state({"flushed": True}, rows, 32, "trace")
    assert trace["state"] == "cold" and trace["first_requests"]["checked"] == 0


def test_one_block_or_the_template_head_is_allowed() -> None:
    rows = [row(0, 0, 0), row(1, 1, 512), row(2, 0, 32, group=1), row(3, 0, None, group=2)]
    check = first_requests(rows, block_tokens=32)
    assert check.cold and check.checked == 3  # SGLang's null: zero cached, once others report numbers
    silent = first_requests([row(0, 0, None), row(1, 1, None)], 32)
    assert silent.checked == 0 and silent.unknown == 2 and silent.cold
    assert first_requests([row(0, 0, HEAD_SLACK)], block_tokens=1).cold  # page size 1: the head still fits
    assert not first_requests([row(0, 0, HEAD_SLACK + 1)], block_tokens=1).cold


def test_no_reset_is_warm_start_unless_the_server_was_fresh() -> None:
    rows = [row(0, 0, 0)]
    none = cache_state({"flushed": None, "flush_note": "no flush endpoint (HTTP 404)"}, rows, None)
    assert none["state"] == "warm-start" and none["flags"] == {
        "warm-start": "cache not reset: no flush endpoint (HTTP 404)"
    }
    refused = cache_state(
        {"flushed": False, "flush_note": "not flushed after 60 tries (HTTP 400)"}, rows, None
    )
    assert refused["state"] == "warm-start" and "60 tries" in refused["flags"]["warm-start"]
    fresh = cache_state({"flushed": None, "fresh_server": True}, rows, None)
    assert fresh["state"] == "cold" and fresh["flags"] == {}
    both = cache_state({"flushed": None}, [row(0, 0, 500)], 16)
    assert both["state"] == "warm-start" and set(both["flags"]) == {"warm-start", "cache-not-cold"}
    assert worst_state(["cold", "cache-not-cold", "cold"]) == "cache-not-cold"
    assert worst_state(["cache-not-cold", "warm-start"]) == "warm-start"


# ---------------------------------------------------------------- against a real HTTP server


@pytest.fixture
def stdlib_server(request):
    mode = request.param
    server = ScriptServer(STDLIB_CACHE_SERVER, "--port", "0", "--reset", mode)
    yield mode, server.url
    server.stop()


def _spec(tmp_path: Path) -> Path:
    wl = shared_prefix(prompts_per_group=3, question_tokens=4, output_tokens=2)
    # groups=2 repeats group 0's system prompt: warm unless reset
    return write_spec(tmp_path, "cold", wl, model="m", concurrency=2, seeds=[0], sweep={"groups": [1, 2]})


@pytest.mark.slow
@pytest.mark.parametrize("stdlib_server", ["real", "noop", "none"], indirect=True)
def test_flags_follow_what_the_reset_did(stdlib_server, tmp_path: Path) -> None:
    mode, url = stdlib_server
    cap, out = tmp_path / "capture", tmp_path / "summaries"
    r = _harness(
        "run", str(_spec(tmp_path)), "--server-url", url, "--node", "n", "--capture", str(cap), "--quiet"
    )
    assert r.returncode == 0, r.stderr
    r = _harness("summarize", str(cap / "n"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "n.json").read_text())
    by_groups = {p["sweep"]["groups"]: p for p in summary["points"]}
    second = by_groups[2]
    point_json = json.loads(Path(second["seeds"]["0"]["path"], "point.json").read_text())
    if mode == "real":
        assert [p["cache_state"] for p in summary["points"]] == ["cold", "cold"]
    elif mode == "noop":  # the reset said success: only the first requests show the cache was warm
        assert point_json["flushed"] is True
        assert by_groups[1]["cache_state"] == "cold" and second["cache_state"] == "cache-not-cold"
        why = second["cache_flags"]["cache-not-cold"]
        assert "1 of 2 groups/sessions found more than 16 tokens cached even on their first request" in why
    else:  # no endpoint: every point is a warm start
        assert point_json["flushed"] is None
        assert {p["cache_state"] for p in summary["points"]} == {"warm-start"}
        why = second["cache_flags"]["warm-start"]
        assert (
            "no flush endpoint (/flush_cache HTTP 404; /reset_prefix_cache?reset_external=true HTTP 404)"
            in why
        )
    r = _harness("report", str(out / "n.json"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    md = (out / "n.md").read_text()
    v = _harness("validate", str(out / "n.json"), "--json")
    rows = json.loads(v.stdout)["points"]
    if mode == "real":
        assert "Not measured on a cold cache" not in md
        assert all(x["cache_state"] == "cold" for x in rows)
    else:
        state = second["cache_state"]
        assert f"- ⚠ {state}: attached groups=2" in md
        assert v.returncode == 1
        flagged = [x for x in rows if x["sweep"] == {"groups": 2}]
        assert flagged[0]["flagged"] and any(x.startswith(state) for x in flagged[0]["reasons"])
