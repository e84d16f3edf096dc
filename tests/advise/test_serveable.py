"""Serveability (harness.advise.serveable): a pool that rejects requests is no candidate, today's and the
card default's rejections lead the headline with the levers that fix them; the three memory defects of the
same issue (FP8 KV halves the host tier, --hicache-size for a replica's whole share, the GB10's one memory).
Small block traces built here: the issue's L4 case in miniature (a 6-block default pool, prompts up to 250
blocks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.advise import grid
from harness.advise.advice import Options, advise
from harness.advise.launch_line import sglang_line
from harness.advise.levers import FP8_CAVEAT, Levers, tp_pool_tokens
from harness.advise.node import resolve
from harness.advise.serveable import Lengths, serveability
from harness.errors import HarnessError
from harness.sim.engine import Engine
from harness.sim.timing import resolve_profile
from harness.whatif.grid import Config
from harness.whatif.serve import engine_config
from harness.whatif.trace import Trace, TraceRequest

BLOCK = 512


def _trace(lengths: list[int], output: int = 200) -> Trace:
    """Requests of these lengths (blocks), each sharing its first block with the one before."""
    reqs, nxt = [], 1
    for i, n in enumerate(lengths):
        key = (0, *range(nxt, nxt + n - 1))
        nxt += n
        reqs.append(TraceRequest(key, n * BLOCK - 100, i * 0.5, output))
    return Trace("serve", reqs, unit=BLOCK, kind="blocks")


# most over the L4's 6-block (3,072-token) default pool, the longest 240 blocks (122,780 tokens)
LENGTHS = [3, 4, 12, 20, 9, 40, 5, 80, 16, 240, 7, 30, 100, 14, 2, 60]


def _serve(card: str, lengths: list[int], pool: int | None = None, gpus: int = 8):
    prof = resolve_profile(card, "llama-3.1-8b-instruct")
    trace = _trace(lengths)
    lv = Levers(prof, BLOCK, "blocks")
    device = prof.default_pool_tokens // BLOCK
    return serveability(Lengths(trace, prof.context_length), prof, lv, None, pool or device, device, gpus)


def test_rejections_follow_the_sims_own_rule():
    """advise's count is the sim engine's: a request over max_input_len is aborted there."""
    prof = resolve_profile("l4", "llama-3.1-8b-instruct")
    trace = _trace(LENGTHS)
    lengths = Lengths(trace, prof.context_length)
    for pool in (6, 13, 41, 240, 241, 300):
        eng = Engine(engine_config(Config("lru", pool), prof, trace))
        sim = sum(len(r.key) + len(r.output_key) > eng.max_input_len() for r in trace.requests)
        got = lengths.rejects(pool)
        assert got.requests == sim, pool
        assert got.share == pytest.approx(sim / len(LENGTHS))
    assert lengths.need == 241 and lengths.rejects(241).requests == 0 and lengths.rejects(240).requests == 1
    over = np.asarray(LENGTHS) > 5
    tokens = np.asarray([r.tokens for r in trace.requests])
    assert lengths.rejects(6).token_share == pytest.approx(tokens[over].sum() / tokens.sum())


def test_the_l4_default_pool_is_flagged_and_tp_or_a_larger_card_fixes_it():
    s = _serve("l4", LENGTHS)
    assert s.today.pool_tokens == 3_072 and s.flagged
    assert s.today.requests == sum(n > 5 for n in LENGTHS)  # 12 of 16
    assert s.headline.startswith(
        "SGLang's default pool on an L4 (3,072 tokens) rejects 75.0% of the requests"
    )
    kinds = [f.kind for f in s.fixes]
    assert kinds == ["fp8", "tp", "card"], kinds
    fp8, tp, card = s.fixes
    assert fp8.rejects.requests == 1 and FP8_CAVEAT in fp8.text  # 123k tokens do not fit one L4
    assert "--kv-cache-dtype fp8_e4m3" in fp8.launch.line()
    assert tp.rejects.requests == 0 and "--tp 2" in tp.launch.line() and "--tp 2" in s.headline
    assert card.rejects.requests == 0 and "--card h100" in card.text
    assert s.tp == 2 and s.start_pool == 241  # the recommendation starts on --tp 2 at the pool that serves
    assert "launch with --tp 2" in s.headline and "still rejecting" not in s.headline.split("launch with")[1]


def test_a_fraction_that_serves_is_the_only_fix_and_nothing_rejecting_is_quiet():
    s = _serve("l4", [3, 4, 8, 10])  # 10 blocks: a larger --mem-fraction-static suffices
    assert s.flagged and [f.kind for f in s.fixes] == ["fraction"]
    assert "--mem-fraction-static" in s.fixes[0].launch.line() and s.fixes[0].rejects.requests == 0
    assert s.tp == 1 and s.start_pool == 11
    quiet = _serve("h100", [3, 4, 8, 10])
    assert not quiet.flagged and quiet.headline == "" and quiet.fixes == []


def test_when_no_lever_serves_every_request_the_least_rejecting_is_kept_with_its_share(monkeypatch):
    s = _serve("l4", LENGTHS, gpus=1)  # no --tp on a one-GPU node; the H100 still serves it
    assert [f.kind for f in s.fixes] == ["fp8", "card"] and s.tp == 1
    monkeypatch.setattr("harness.advise.serveable.CARDS", {})  # no larger card to name either
    none = _serve("l4", LENGTHS, gpus=1)
    assert none.flagged and [f.kind for f in none.fixes] == ["fp8"] and none.fixes[0].rejects.requests == 1
    assert "no lever reaches a pool that serves them all; the least-rejecting is FP8 KV" in none.headline
    assert "still rejecting 6.2%" in none.headline  # 1 of 16
    assert none.start_pool == none.fixes[0].rejects.pool  # the recommendation starts at that pool


def test_tp_pool_model():
    prof = resolve_profile("l4", "llama-3.1-8b-instruct")
    one, two = prof.default_pool_tokens, tp_pool_tokens(prof, 2)
    assert two > 30 * one  # the weights' 16 GB split: far more room per card than 2x
    assert tp_pool_tokens(prof, 3) == 0  # 32 heads do not split 3 ways


def test_advise_offers_no_line_that_rejects_and_leads_with_the_share():
    trace = _trace(LENGTHS)
    prof = resolve_profile("l4", "llama-3.1-8b-instruct")
    opts = Options(card="l4", model="llama-3.1-8b-instruct", host_memory_gb=64, gpus_per_node=8, workers=1)
    a = advise(Path("serve.jsonl"), opts, prof, trace=trace)
    s = a.serveable
    assert s is not None and s.flagged
    assert a.recommendation.headline.startswith(s.headline)
    lengths = Lengths(trace, prof.context_length)
    assert a.candidates and all(lengths.rejects(c.config.pool).requests == 0 for c in a.candidates)
    line = a.launch(a.recommendation.chosen).line()
    assert "--tp 2" in line and "--max-total-tokens 3072 " not in line
    assert not any(c.config.pool == 6 for c in a.candidates)
    from harness.advise.json_out import to_dict
    from harness.advise.markdown import render

    d = to_dict(a)
    assert d["serveable"]["today"]["flagged"] and d["serveable"]["today"]["rejected_requests"] == 12
    md = render(a)
    assert "## Serveability" in md and md.index("## Serveability") < md.index("## Recommendation")


def test_fp8_halves_the_host_tier_and_the_grid_sizes_it_so():
    """H100, Llama-3.1-8B, 256 GB a node of 2 replicas: 128 GB a replica."""
    prof = resolve_profile("h100", "llama-3.1-8b-instruct")
    lv = Levers(prof, BLOCK, "blocks")
    bf16 = prof.default_pool_tokens // BLOCK  # 808 blocks, 54 GB of bf16 KV
    fp8 = 2 * bf16  # only FP8 KV reaches it, at half the bytes
    assert lv.kv_bytes(bf16) == prof.kv_bytes_per_token and lv.kv_bytes(fp8) == prof.kv_bytes_per_token // 2
    assert lv.host_gb(fp8, 2.0) == pytest.approx(lv.host_gb(bf16, 2.0) * 2 * 0.5)
    trace = _trace([3])
    assert grid.host_ratios(fp8, BLOCK, prof, 128.0, lv)[:1] == [2.0]  # FP8 + 2x host fits 128 GB
    assert 2.0 not in grid.host_ratios(fp8, BLOCK, prof, 128.0)  # sized in bf16 it did not
    assert grid.host_ratios(fp8, BLOCK, prof, 256.0, lv)[:2] == [2.0, 4.0]  # 512 GB a node: 4x fits
    built = grid.build(trace, [bf16, fp8], prof, 128.0, priorities=False, levers=lv)
    assert any(c.pool == fp8 and c.host_ratio == 2.0 for c in built)


def test_hicache_size_is_offered_where_a_ratio_overshoots_the_share():
    prof = resolve_profile("h100", "llama-3.1-8b-instruct")
    lv = Levers(prof, BLOCK, "blocks")
    bf16 = prof.default_pool_tokens // BLOCK
    ratios = grid.host_ratios(bf16, BLOCK, prof, 128.0, lv)  # 128 GB holds 2.36x a 54 GB pool
    assert ratios[0] == 2.0 and len(ratios) == 2 and 2.3 < ratios[1] < 2.37
    assert lv.host_gb(bf16, ratios[1]) <= 128.0 and lv.size_gb(bf16, ratios[1]) == 128.0
    line = sglang_line(Config("lru", bf16, ratios[1], "write_through"), lv, None).line()
    assert "--hicache-size 128 " in line and "--hicache-ratio" not in line
    assert "--hicache-size 128 (2.36x): 128.0 GB" in lv.host_lever(bf16, ratios[1], 128.0)
    assert grid.host_ratios(bf16, BLOCK, prof, 240.0, lv) == [2.0, 4.0]  # both fit: no size


def test_gb10_is_one_gpu_whose_host_tier_is_what_the_pool_leaves():
    prof = resolve_profile("gb10", "qwen3-30b-a3b")
    node = resolve(prof, None, 1, None, None)
    assert node.gpus == 1 and node.host_memory_gb == 0.0  # weights + default pool + reserve: all 128 GB
    assert "one 128 GB memory for CPU and GPU" in node.unified and "same memory" in node.unified
    half = resolve(prof, None, 1, None, None, pool_tokens=prof.default_pool_tokens // 2)
    assert half.host_memory_gb == pytest.approx(
        prof.default_pool_tokens // 2 * prof.kv_bytes_per_token / 1e9, abs=0.6
    )
    with pytest.raises(HarnessError, match="--replicas-per-node: 2, but a gb10 node has one GPU"):
        resolve(prof, None, 2, 2, None)
