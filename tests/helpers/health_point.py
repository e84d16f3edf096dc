"""One sim point run, summarized and rendered, for the health-verdict tests: its verdicts and its funnel.

Why a helper: tests/verdicts/test_health.py and test_prefetch_declined.py run their sims the same way, and a
test module never imports another (tests/test_layout.py).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from harness.report.markdown import render as render_markdown
from harness.spec import load_spec
from harness.summarize.summary import summarize, write_summaries
from harness.sweep.attach import run_attached
from tests.helpers import specs
from tests.helpers.procs import SimProc

SIM = (
    "--card-profile", "tiny-test", "--time-scale", "1.0", "--enable-metrics",
    "--max-total-tokens", "1500", "--enable-hierarchical-cache", "--hicache-ratio", "4",
)  # fmt: skip


SESSIONS = specs.multi_turn(
    sessions=8, turns=6, system_prompt_tokens=64, question_tokens=24, answer_tokens=16
)
STALL_TIMEOUTS = {"connect": 5, "first_token": 100, "total": 200, "stall": 2}
# one stream of 400-token prompts through the pool: the room left after each allocation stays free
BIG_PROMPTS = specs.shared_prefix(groups=8, prompts_per_group=2, system_prompt_tokens=400, question_tokens=16)


def health_point(
    tmp_path: Path, *fault: str, wl: dict = SESSIONS, c: int = 4, sim: tuple = SIM, **spec_over
) -> tuple[list[dict], dict]:
    d = tmp_path / "sim"
    d.mkdir()
    p = SimProc(d, *sim, *fault)
    try:
        path = specs.write_spec(
            tmp_path,
            "health",
            wl,
            file=f"h-{uuid.uuid4().hex[:6]}.yaml",
            concurrency=c,
            seeds=[0],
            **spec_over,
        )
        spec = load_spec(path)
        run_attached(
            spec, spec.points(), server_url=p.url, server_name="sim", node="n", capture=tmp_path / "cap",
            seeds=None, quiet=True, gpus=None, log=lambda _m: None, metrics_interval_s=0.05,
        )  # fmt: skip
    finally:
        p.stop()
    (s,) = summarize([tmp_path / "cap" / "n"]).values()
    write_summaries({"n": s}, tmp_path / "summaries")
    data = json.loads(s.model_dump_json())
    (pt,) = data["points"]
    report = render_markdown(data)
    for v in pt["health"]:  # the report says each verdict with its window
        assert f"**{v['verdict']}** sim" in report, report
    assert ("HiCache tier funnel" in report) == bool(pt.get("hicache_funnel"))
    return pt["health"], (pt.get("hicache_funnel") or {}).get("0", {})
