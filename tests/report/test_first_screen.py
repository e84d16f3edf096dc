"""The first screen of the report, on the committed sample summary (the default suite on the sim): the
page holds the verdict line and every At-a-glance finding the .md holds, At a glance fits 40 lines and
opens each experiment with its answer, and a routing experiment's table is titled by routing."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from harness.report import html_page, markdown
from harness.report.common import load_summary
from harness.report.glance import glance
from harness.summary import Summary

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "sample" / "cpu-sim.json"
SCREEN_LINES = 40


@pytest.fixture(scope="module")
def sample() -> Summary:
    return load_summary(SAMPLE)


def _at_a_glance(md: str) -> list[str]:
    block = md.split("## At a glance\n", 1)[1]
    return block.split("\n## ", 1)[0].strip("\n").splitlines()


def _page_text(page: str) -> str:
    """What a reader sees: the body without scripts and tags, entities decoded, spaces collapsed."""
    body = re.sub(r"<script.*?</script>", " ", page.split("<body>", 1)[1], flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", body)))


def test_the_page_holds_the_verdict_line_and_every_finding_of_the_mds_at_a_glance(sample: Summary) -> None:
    md = markdown.render(sample)
    text = _page_text(html_page.render(sample))
    assert sample.verdict is not None and f"Verdicts: {sample.verdict.line}." in text
    glance_lines = [ln for ln in _at_a_glance(md) if ln.startswith(("- **", "  - "))]
    assert len(glance_lines) >= 2 * len(sample.experiments)  # an answer and its misses per experiment
    for line in glance_lines:
        said = re.sub(r"^\s*- ", "", line).replace("**", "").replace("`", "")
        assert said in text, said
    # and before the first experiment's tables: the first screen, not the bottom of the page
    assert text.index(sample.verdict.line) < text.index("At a glance") < text.index("Routing × replicas")


def test_at_a_glance_fits_one_screen_and_opens_each_experiment_with_its_answer(sample: Summary) -> None:
    lines = _at_a_glance(markdown.render(sample))
    assert len(lines) <= SCREEN_LINES, "\n".join(lines)
    entries = {g.experiment: g for g in glance(sample)}
    assert set(entries) == set(sample.experiments)
    heads = [ln for ln in lines if ln.startswith("- **")]
    assert [h.split("**")[1].rstrip(".") for h in heads] == sorted(entries)
    for head in heads:  # the answer first; the miss anatomy on its own line beneath
        assert "of the misses were" not in head, head
    ev = entries["eviction-multiturn"].answer
    assert ev.startswith("At pool 8192, lfu and slru held the later-turn") and "above lru 27.9 %" in ev
    assert entries["working-set"].answer.startswith(
        "HiCache (`hicache`) cut the modelled median TTFT of `gpu-only` by 7.8× at 16 groups"
    )
    assert entries["replicas-multiturn"].answer.startswith("Routing that kept the most prompt tokens cached:")
    assert all(g.misses and "of the misses were" in g.misses for g in entries.values())
    trace = entries["trace-conversation"].note  # the bench's pool against advise's: said where they differ
    assert "`harness advise`" in trace and "32000" in trace and "--pool" in trace
    assert not entries["working-set"].note


def test_a_routing_experiment_is_titled_and_columned_by_routing_and_replicas(sample: Summary) -> None:
    md = markdown.render(sample)
    section = md.split("\n## replicas-multiturn\n", 1)[1]
    assert section.split("\n| ", 1)[0].rstrip().endswith("**Routing × replicas: hit rate per turn**")
    header = section.split("\n| ", 1)[1].split("\n", 1)[0]
    assert header.startswith("routing | replicas | pool (tokens) | server |")
    rows = [r for r in section.split("\n\n")[2].splitlines()[2:]]
    assert {r.split(" | ")[0].lstrip("| ") for r in rows} == {"cache_aware", "prefix_hash", "round_robin"}
    ev = md.split("\n## eviction-multiturn\n", 1)[1]
    assert "**Eviction policy × pool: hit rate per turn**" in ev.split("\n## ", 1)[0]
    page = html_page.render(sample)
    assert "<caption>Routing × replicas: hit rate per turn</caption>" in page


def test_the_first_line_names_the_modelled_card_and_how_to_choose_another(sample: Summary) -> None:
    md = markdown.render(sample)
    head = md.split("## At a glance", 1)[0]
    assert "l4/Llama-3.1-8B-Instruct card" in head and "--card-profile" in head
    assert "--card-profile" in _page_text(html_page.render(sample)).split("At a glance", 1)[0]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first browser test may install chromium on a cold machine
def test_the_page_chromium_renders_opens_with_the_verdict_line_and_at_a_glance(
    sample: Summary, tmp_path: Path
) -> None:
    """What the browser shows (innerText: collapsed details excluded), not the raw HTML."""
    import os

    from tests.helpers.browser import Chromium, can_unshare_net, ensure_chromium

    binary, why = ensure_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests need chromium under CI: {why}")
        pytest.skip(f"chromium cannot be had here: {why}")
    b = Chromium(binary, no_network=can_unshare_net())
    try:
        path = tmp_path / "cpu-sim.html"
        path.write_text(html_page.render(sample), encoding="utf-8")
        res = b.load(path)
    finally:
        b.close()
    first = res.dom["firstScreen"]
    assert sample.verdict is not None and sample.verdict.line in first["verdict"]
    shown = re.sub(r"\s+", " ", first["glance"])
    for g in glance(sample):
        for said in (g.answer, g.misses, g.note):
            assert said.replace("`", "") in shown, said
    assert first["glanceTop"] < 900 / 2  # it starts in the top half of a laptop's first screen
    assert "every server is the sim" not in shown  # the time-scale list is collapsed, not on it
    if os.environ.get("HARNESS_UPDATE_DOCS"):
        (SAMPLE.parent / "cpu-sim-html-first-screen.png").write_bytes(res.screenshot)


def test_on_sim_points_no_table_shows_the_sims_wall_ttft_beside_the_modelled_one(sample: Summary) -> None:
    """Every sample point is a sim's: its wall clock only paced the run, so outside the collapsed details
    no table header names a wall-clock TTFT; the modelled one leads."""
    md = markdown.render(sample)
    shown = re.sub(r"<details>.*?</details>", "", md, flags=re.S)
    lines = shown.splitlines()
    headers = [lines[i] for i in range(len(lines) - 1) if lines[i + 1].startswith("|---")]
    cells = {c.strip() for h in headers for c in h.strip("|").split("|")}
    wall = {c for c in cells if re.match(r"^(TTFT (median|p\d+)|median TTFT)", c)}
    assert not wall, wall  # where a sim's wall clock is still shown (per worker, per bucket) it says so
    assert {"wall TTFT p50 / p99 ms", "wall TTFT p50 ms"} <= cells
    assert any(c.startswith("modelled median TTFT ms") for c in cells)
    assert "modelled TTFT p50 ms" in cells  # the latency and How-sure tables: the card's time
    hidden = "".join(re.findall(r"<details>.*?</details>", md, flags=re.S))
    assert "wall TTFT p50 ms" in hidden  # kept, under its own name, for whoever checks the pacing
