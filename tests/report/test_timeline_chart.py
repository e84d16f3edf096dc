"""The page's timeline chart per point: drawn in headless Chromium from a HiCache sim run's summary."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from harness.report.chart_data import experiment_charts
from harness.report.html_page import render
from harness.spec import load_spec
from harness.summarize.summary import summarize
from harness.sweep.attach import run_attached
from tests.helpers import specs
from tests.helpers.browser import Chromium, can_unshare_net, ensure_chromium
from tests.helpers.procs import SimProc

SIM = ("--card-profile", "tiny-test", "--time-scale", "1.0", "--enable-metrics", "--max-total-tokens", "1500",
       "--enable-hierarchical-cache", "--hicache-ratio", "4")  # fmt: skip
SHOT = os.environ.get("HARNESS_TIMELINE_SHOT")  # a path: keep the screenshot there


@pytest.mark.slow
def test_each_point_has_a_timeline_chart_drawn_on_the_page(tmp_path: Path) -> None:
    (tmp_path / "sim").mkdir()
    p = SimProc(tmp_path / "sim", *SIM)
    try:
        wl = specs.multi_turn(
            sessions=8, turns=6, system_prompt_tokens=64, question_tokens=24, answer_tokens=16
        )
        path = specs.write_spec(
            tmp_path, "tl", wl, file=f"t-{uuid.uuid4().hex[:6]}.yaml", concurrency=4, seeds=[0]
        )
        spec = load_spec(path)
        run_attached(spec, spec.points(), server_url=p.url, server_name="sim", node="n", capture=tmp_path / "cap",
                     seeds=None, quiet=True, gpus=None, log=lambda _m: None, metrics_interval_s=0.05)  # fmt: skip
    finally:
        p.stop()
    (s,) = summarize([tmp_path / "cap" / "n"]).values()
    data = json.loads(s.model_dump_json())
    (chart,) = [c for c in experiment_charts("tl", [("n", data["points"])]) if c["kind"] == "timeline"]
    labels = [x["label"] for x in chart["series"]]
    assert "token usage (%)" in labels and "evicted tokens/s (/100)" in labels, labels
    html = tmp_path / "page.html"
    html.write_text(render(data))
    binary, why = ensure_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests need chromium under CI: {why}")
        pytest.skip(f"chromium cannot be had here: {why}")
    b = Chromium(binary, no_network=can_unshare_net())
    try:
        page = b.load(html, shot_at='figure.chart[data-kind="timeline"]')
    finally:
        b.close()
    (drawn,) = [c for c in page.dom["charts"] if c["kind"] == "timeline"]
    assert drawn["error"] is None and drawn["canvas"]["painted"] > 1000, drawn
    assert page.requests == [] or all(r.startswith(("file:", "data:")) for r in page.requests), page.requests
    if SHOT:
        Path(SHOT).write_bytes(page.screenshot)
