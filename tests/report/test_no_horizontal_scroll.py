"""The summary page and advise.html in headless chromium at a 1280 px wide viewport: no horizontal page
scroll and no clipped line (issue 62, build item 7).

The rule, per rendered element E of <body> (inside an inline SVG only the <svg> itself counts):
  - E's right edge is within the viewport, unless E sits inside a scroll container made on purpose
    (SCROLLERS: `.table-wrap` around a table, `pre.evidence`), whose box is itself held to the viewport;
  - E's content fits its box (scrollWidth <= clientWidth + 1 px) unless E is one of SCROLLERS with
    overflow-x auto or scroll: a box that hides what passes its edge (overflow hidden or clip) or lets it
    spill onto its neighbours (visible) is a clipped line. A child that spills also shows on its parent,
    so an unwrapped wide table is caught on <main> though the table's own box fits its content.
And the page: document.documentElement.scrollWidth <= 1280.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.report import html_page
from harness.report.common import load_summary
from tests.helpers.cli import harness

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "docs" / "sample" / "cpu-sim.json"
TRACE = ROOT / "tests" / "data" / "mooncake" / "conversation_trace.jsonl"
WIDTH = 1280
VIEWPORT = {"width": WIDTH, "height": 800, "deviceScaleFactor": 1, "mobile": False}
SCROLLERS = ".table-wrap, pre.evidence"
SHOT_BYTES = 150_000  # a committed screenshot stays under this

PROBE = r"""
(() => {
  const SCROLLERS = SCROLLERS_JSON;
  const vw = document.documentElement.clientWidth;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\s+/).join('.') : '')
    + ' "' + el.textContent.replace(/\s+/g, ' ').trim().slice(0, 60) + '"';
  const bad = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.tagName.toLowerCase() !== 'svg' && el.closest('svg')) continue;
    const cs = getComputedStyle(el);
    if (el.getClientRects().length === 0) continue;  // not rendered (display none, a closed <details>)
    const inScroller = el.parentElement && el.parentElement.closest(SCROLLERS);
    const right = el.getBoundingClientRect().right;
    if (!inScroller && right > vw + 1) bad.push('past the viewport (right ' + Math.round(right) + ' px): ' + name(el));
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
      const scrolls = ['auto', 'scroll'].includes(cs.overflowX) && el.matches(SCROLLERS);
      if (!scrolls) bad.push('content ' + el.scrollWidth + ' px in a ' + el.clientWidth + ' px box (overflow-x '
                             + cs.overflowX + '): ' + name(el));
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, viewport: vw, bad};
})()
""".replace("SCROLLERS_JSON", json.dumps(SCROLLERS))


def _small_png(png: bytes) -> bytes:
    """A screenshot of text in 64 colours: the same page to the eye at a third of the bytes (docs stay light)."""
    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=64).save(out, format="PNG", optimize=True)
    return out.getvalue()


@pytest.fixture(scope="module")
def browser() -> Any:
    from tests.helpers.browser import Chromium, can_unshare_net, ensure_chromium

    binary, why = ensure_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests need chromium under CI: {why}")
        pytest.skip(f"chromium cannot be had here: {why}")
    b = Chromium(binary, no_network=can_unshare_net())
    yield b
    b.close()


def _load(browser: Any, page: Path) -> tuple[dict[str, Any], bytes]:
    res = browser.load(page, viewport=VIEWPORT, probe=PROBE)
    assert not res.errors, res.errors
    return res.dom["probe"], res.screenshot


def _assert_fits(probe: dict[str, Any]) -> None:
    assert probe["viewport"] == WIDTH, probe
    assert probe["scrollWidth"] <= WIDTH, probe
    assert probe["bad"] == [], "\n".join(probe["bad"])


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first browser test may install chromium on a cold machine
def test_the_summary_page_fits_1280_px_with_no_clipped_line(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "cpu-sim.html"
    page.write_text(html_page.render(load_summary(SAMPLE)), encoding="utf-8")
    probe, shot = _load(browser, page)
    _assert_fits(probe)
    if os.environ.get("HARNESS_UPDATE_DOCS"):
        small = _small_png(shot)
        assert len(small) < SHOT_BYTES, len(small)
        (SAMPLE.parent / "cpu-sim-html-1280.png").write_bytes(small)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_advise_html_fits_1280_px_with_no_clipped_line(browser: Any, tmp_path: Path) -> None:
    trace = tmp_path / "conversation-300.jsonl"
    with TRACE.open(encoding="utf-8") as f:
        trace.write_text("".join(line for _, line in zip(range(300), f, strict=False)), encoding="utf-8")
    out = tmp_path / "adv"
    r = harness("advise", str(trace), "--card", "h100", "--model", "llama-3.1-8b-instruct",
                "--host-memory", "512", "-o", str(out), timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    page = out / "advise.html"
    assert '<div class="table-wrap"><table>' in page.read_text(encoding="utf-8")
    assert '<span class="arg">--enable-metrics</span>' in page.read_text(encoding="utf-8")
    probe, shot = _load(browser, page)
    _assert_fits(probe)
    if os.environ.get("HARNESS_UPDATE_DOCS"):
        small = _small_png(shot)
        assert len(small) < SHOT_BYTES, len(small)
        (ROOT / "docs" / "sample" / "advise-1280.png").write_bytes(small)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_rule_flags_an_unwrapped_wide_table_a_clipped_cell_and_an_unwrapping_pre(
    browser: Any, tmp_path: Path
) -> None:
    """The probe can fail: report.css with three faults the pages must not have, and one wide table inside
    its .table-wrap, which is allowed."""
    css = html_page._asset("report.css")
    cells = "".join(f"<td>column-{i}-with-a-long-value</td>" for i in range(40))
    body = (
        f'<p id="a">intro</p><table id="wide"><tr>{cells}</tr></table>'
        f'<div class="table-wrap"><table id="wrapped"><tr>{cells}</tr></table></div>'
        f'<table style="table-layout: fixed; width: 300px"><tr><td style="overflow: hidden; width: 100px">'
        f"{'x' * 80}</td></tr></table>"
        f'<pre style="white-space: pre">{"--flag value " * 30}</pre>'
    )
    page = tmp_path / "faulty.html"
    page.write_text(
        f"<!DOCTYPE html><html><head><style>{css}</style></head><body><main>{body}</main></body></html>"
    )
    probe, _ = _load(browser, page)
    bad = "\n".join(probe["bad"])
    assert probe["scrollWidth"] > WIDTH  # the unwrapped table scrolls the page
    assert "past the viewport" in bad and 'table#wide "column-0' in bad, bad  # the wide table, unwrapped
    assert '(overflow-x hidden): td "xxx' in bad, bad  # the clipped cell
    assert '(overflow-x visible): pre "--flag value' in bad, bad  # the line that spills from its box
    assert "table-wrap" not in bad and "#wrapped" not in bad, bad


def test_a_launch_lines_flags_wrap_whole_and_its_text_is_unchanged() -> None:
    """The spans only keep `--flag value` together at a wrap: stripped of tags the line reads (and copies) as
    before, a value over ARG_KEEP characters may still wrap, and the worker/router lines stay lines."""
    import html as html_mod
    import re

    from harness.advise.html import ARG_KEEP, _code

    long_value = "x" * (ARG_KEEP + 5)
    line = (
        f"A=1 python -m sglang.launch_server --model-path m --enable-metrics --cfg {long_value}\nsmg --port 3"
    )
    page = _code(line)
    assert html_mod.unescape(re.sub(r"<[^>]+>", "", page)) == line
    spans = re.findall(r'<span class="arg">(.*?)</span>', page)
    assert spans == [
        "A=1 python -m sglang.launch_server",
        "--model-path m",
        "--enable-metrics",
        "smg",
        "--port 3",
    ]
    assert f"--cfg {long_value}" in page  # too long to keep whole: left to wrap anywhere
