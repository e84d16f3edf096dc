"""Every advise output holds its recommendation to its own candidates table: when the best candidate by
the table's measure (hit rate, then modelled TTFT mean, then goodput) beats the chosen configuration by
MIN_GAIN or more, the Markdown, the page and the JSON name it (or, within half a point of it, the one that
changes less) with its figures and why the steps did not take it; otherwise none is named. Every named
configuration carries its launch line. Pool steps name their lever and no candidate's pool is past every lever.
Over the shipped inputs and random specs."""

from __future__ import annotations

import json
import random
import shlex
from pathlib import Path

import pytest

from harness.advise.advice import Advice, Options, advise, check
from harness.advise.better import MIN_GAIN, TIE_POINTS, measure, preferred
from harness.advise.html import render as render_html
from harness.advise.json_out import to_dict
from harness.advise.levers import Levers
from harness.advise.markdown import render as render_md
from harness.advise.slo import Slo
from harness.report.html_page import esc
from harness.sim.timing import resolve_profile
from tests.helpers.specs import multi_turn, shared_prefix, write_spec

pytestmark = pytest.mark.slow  # whole advise runs: exact grids through the what-if engine

REPO = Path(__file__).resolve().parents[2]
LEVER_WORDS = ("the card's default pool", "--mem-fraction-static", "FP8 KV", "--max-total-tokens")


def hold(a: Advice, opts: Options) -> bool:
    """Assert the rule on one advice and its three outputs; True when it named a better candidate."""
    r = a.recommendation
    best = max(a.candidates, key=measure)
    md, page, d = render_md(a), render_html(a), to_dict(a)
    assert json.loads(json.dumps(d)) == d
    assert d["recommendation"]["launch"]["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    for c in d["candidates"]:  # the shell reads the line back as exactly the environment and the argv
        ln = c["launch"]
        assert shlex.split(ln["line"]) == [f"{k}={v}" for k, v in ln["env"].items()] + ln["argv"]
    top = d["candidates"][0]  # every output ranks by the same measure
    assert (top["pool"], top["policy"], top["host_ratio"]) == (
        best.config.pool,
        best.config.policy,
        best.config.host_ratio,
    )
    assert md.split("## Candidates (exact replay)")[1].split("\n")[4].startswith(f"| {best.label()} |")
    named = d["recommendation"]["better_candidate"]
    if best.hit_rate - r.chosen.hit_rate >= MIN_GAIN:
        b = r.better
        # the best, or one within half a point of it that changes less (fewer levers, no FP8, no write_back)
        assert (
            b is not None
            and b.chosen is r.chosen
            and best.hit_rate - b.candidate.hit_rate <= TIE_POINTS + 1e-12
        )
        gaining = [c for c in a.candidates if c.hit_rate - r.chosen.hit_rate >= MIN_GAIN]
        assert b.candidate is preferred(
            gaining, r.chosen, Levers(resolve_profile(opts.card, opts.model), a.unit_tokens)
        )
        best = b.candidate
        assert named["config"] == b.candidate.label() and named["hit_rate"] == round(best.hit_rate, 6)
        assert named["gain_points"] >= MIN_GAIN * 100 - 1e-9 and named["ttft_ms"]["mean"] > 0
        assert named["why"] and named["why"][0].startswith("The steps change one lever at a time")
        section = md.split("### A better candidate the steps did not take")[1].split("## Working set")[0]
        assert b.candidate.label() in section and f"{best.hit_rate:.1%}" in section
        assert all(w in section for w in b.why)
        assert esc(b.figures()) in page and all(esc(w) in page for w in b.why)
        c, x = best.config, r.chosen.config
        why = " ".join(b.why)
        if c.pool > x.pool:
            assert "Memory: a device pool of" in why
        if (
            c.host_ratio > 0
            and c.write_policy == "write_back"
            and not (x.host_ratio > 0 and x.write_policy == "write_back")
        ):
            assert (
                "write_back copies a node to host only when the device evicts it" in why
                and "ms a request" in why
            )
        if best.modelled.ttft_ms["mean"] > r.chosen.modelled.ttft_ms["mean"]:
            assert "Latency: its modelled TTFT mean is higher" in why
        return True
    assert r.better is None and named is None
    assert "A better candidate" not in md and "A better candidate" not in page
    return False


def hold_levers(a: Advice, opts: Options) -> None:
    levers = Levers(resolve_profile(opts.card, opts.model), a.unit_tokens, a.unit)
    for s in a.recommendation.steps:
        if s.action.startswith("grow the device pool"):
            assert any(w in s.action for w in LEVER_WORDS), s.action
        if s.action.startswith("enable HiCache"):
            assert "--hicache-ratio" in s.action or "--hicache-size" in s.action
    assert all(c.config.pool == a.current_pool or levers.reachable(c.config.pool) for c in a.candidates)


SHIPPED = [
    (
        "tests/data/mooncake/conversation_trace.jsonl",
        Options(card="h100", model="llama-3.1-8b-instruct", host_memory_gb=256, workers=2),
    ),
    ("tests/data/bailian/sessions.jsonl", Options(card="l4", block_size=16, workers=1)),
    ("workloads/working-set.yaml", Options(card="l4", model="Qwen3-0.6B", pool=8192, workers=1)),
    ("workloads/eviction-multiturn.yaml", Options(card="l4", pool=8192, host_memory_gb=64, workers=1)),
    ("workloads/capacity-sessions.yaml", Options(card="h200", slo=Slo(ttft_ms=50), workers=1)),
]


@pytest.mark.parametrize(("path", "opts"), SHIPPED, ids=[Path(p).stem for p, _ in SHIPPED])
def test_shipped_inputs_hold_the_recommendation_to_its_candidates(path: str, opts: Options) -> None:
    p = REPO / path
    a = advise(p, opts, check([p], opts))
    named = hold(a, opts)
    hold_levers(a, opts)
    if p.name == "conversation_trace.jsonl":  # the case: write_back is the better candidate, named
        assert named and a.recommendation.better is not None
        assert a.recommendation.better.candidate.config.write_policy == "write_back"
    if p.name == "working-set.yaml":  # the pool step on the 0.6B: the card's default pool
        (grow,) = [s for s in a.recommendation.steps if s.action.startswith("grow the device pool")]
        assert "the card's default pool" in grow.action


def _random_spec(tmp_path: Path, seed: int) -> tuple[Path, Options]:
    rng = random.Random(seed)
    if rng.random() < 0.5:
        wl = shared_prefix(
            groups=rng.randint(2, 24),
            prompts_per_group=rng.randint(2, 5),
            system_prompt_tokens=rng.choice([256, 512, 1024, 2048]),
            question_tokens=rng.choice([16, 64]),
            output_tokens=rng.choice([4, 16]),
        )
    else:
        wl = multi_turn(
            sessions=rng.randint(2, 8),
            turns=rng.randint(2, 4),
            system_prompt_tokens=rng.choice([128, 512, 1024]),
            question_tokens=rng.choice([32, 128]),
            answer_tokens=rng.choice([8, 32]),
        )
    path = write_spec(
        tmp_path,
        f"r{seed}",
        wl,
        tokenizer="word",
        concurrency=rng.choice([1, 2]),
        seeds=[0],
        api="openai-completions",
    )
    opts = Options(
        card=rng.choice(["l4", "h100"]),
        model=rng.choice([None, "Qwen3-0.6B"]),
        pool=rng.choice([None, rng.randint(300, 3_000), rng.randint(3_000, 12_000)]),
        host_memory_gb=rng.choice([None, 1.0, 64.0]),
        slo=rng.choice([None, Slo(ttft_ms=rng.choice([20, 200]))]),
        workers=1,
    )
    return path, opts


@pytest.mark.parametrize("seed", range(10))  # 5 takes pool and host tier as one step; 7-9 grow the pool
def test_random_specs_hold_the_recommendation_to_its_candidates(tmp_path: Path, seed: int) -> None:
    path, opts = _random_spec(tmp_path, seed)
    a = advise(path, opts, check([path], opts))
    named = hold(a, opts)
    hold_levers(a, opts)
    # since a host tier may fill a replica's share (--hicache-size), the steps reach every seed's best: none
    # of these names a better candidate (the conversation trace above exercises that branch of the rule)
    assert not named
    if seed == 5:  # pool and host tier pay only together: one step, no FP8, no write_back
        assert [s.action.split(":")[0] for s in a.recommendation.steps] == ["together"]
