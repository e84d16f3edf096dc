"""The issue's two shared-prefix cases end to end (L4, Llama-3.1-8B, pool 24,094 tokens, 64 GB host):
4 system prompts of 2,048 tokens fit the pool, so HiCache adds nothing; 32 do not, so it pays."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.advise.advice import Options, advise, check
from harness.advise.slo import Slo
from tests.helpers.specs import shared_prefix, write_spec

pytestmark = pytest.mark.slow  # ~40 exact replays of a few hundred 2k-token requests each

POOL = 24_094


def _advise(tmp_path: Path, groups: int):
    wl = shared_prefix(
        groups=groups, prompts_per_group=6, system_prompt_tokens=2048, question_tokens=32, output_tokens=16
    )
    spec = write_spec(
        tmp_path, f"sp{groups}", wl, tokenizer="word", concurrency=1, seeds=[0], api="openai-completions"
    )
    opts = Options(card="l4", pool=POOL, host_memory_gb=64, slo=Slo(ttft_ms=500), workers=1)
    return advise(spec, opts, check([spec], opts))


def test_four_prompts_fit_the_pool_so_hicache_adds_nothing(tmp_path):
    a = _advise(tmp_path, 4)
    r = a.recommendation
    assert not r.hicache
    assert r.headline.startswith("HiCache adds nothing")
    assert a.working_set.within["5m"] < POOL  # 4 x 2,048 system prompts live at once
    assert not r.steps and r.notes[0].startswith("no change pays")
    hosted = [c for c in a.candidates if c.config.host_ratio > 0 and c.config.pool == POOL]
    assert hosted and all(abs(c.hit_rate - r.baseline.hit_rate) < 0.005 for c in hosted)


def test_thirty_two_prompts_outgrow_the_pool_so_hicache_pays(tmp_path):
    a = _advise(tmp_path, 32)
    r = a.recommendation
    assert r.hicache
    m = re.fullmatch(
        r"HiCache pays: hit rate ([\d.]+)% -> ([\d.]+)%, modelled TTFT mean (\d+) -> (\d+) ms"
        r" \[host memory: [\d.]+ GB a node, from [^\]]+\]",
        r.headline,
    )
    assert m, r.headline
    x, y, ttft_a, ttft_b = (float(g) for g in m.groups())
    assert y - x >= 5 and ttft_b < ttft_a
    assert POOL < a.working_set.within["5m"] <= r.chosen.config.pool * (1 + r.chosen.config.host_ratio)
    actions = [s.action for s in r.steps]
    assert any(s.startswith("enable HiCache") for s in actions)
    # the operators' order: a bigger pool (if any) before the host tier, the policy (if any) last
    order = [
        next((i for i, s in enumerate(actions) if s.startswith(p)), None)
        for p in ("grow", "enable", "eviction")
    ]
    present = [i for i in order if i is not None]
    assert present == sorted(present)
    assert r.chosen.config.host_ratio > 0 and r.chosen.modelled.slo_attained is not None
    # L3 behind the host tier, every backend (each loads a 2k prompt faster than an L4 recomputes it), at
    # the recommended pool; on one instance it finds nothing the host tier does not, so it is a note
    stored = [c for c in a.candidates if c.config.storage]
    assert {c.config.storage for c in stored} == {"file", "mooncake", "hf3fs", "nixl"}
    assert {c.config.pool for c in stored} == {r.chosen.config.pool}
    assert all(c.config.host_ratio > 0 and c.result.prompt_tokens > 0 for c in stored)
    (note,) = [n for n in r.notes if n.startswith("storage tier (HiCache L3")]
    assert "it pays when instances should share" in note
    assert not any("storage" in s.action for s in r.steps)


def test_a_block_trace_gets_l3_candidates_counted_in_tokens(tmp_path):
    """Mooncake hash_ids (512 tokens a block): L3 candidates are in the grid, each tier's hits in tokens
    (four 12-block prefixes round-robin: more than a 16-block pool holds, within its host tier)."""
    import json

    lines = [
        json.dumps(
            {"hash_ids": [g * 100 + b for b in range(12)] + [1000 + rnd * 100 + g], "output_length": 8}
        )
        for rnd in range(3)
        for g in range(4)
    ]
    path = tmp_path / "groups.jsonl"
    path.write_text("\n".join(lines) + "\n")
    opts = Options(card="l4", pool=16, host_memory_gb=64, workers=1)
    a = advise(path, opts, check([path], opts))
    stored = [c for c in a.candidates if c.config.storage]
    assert stored and all(c.config.host_ratio > 0 for c in stored)
    for c in stored:
        r = c.result
        assert r.prompt_tokens == 12 * 13 * 512
        assert (
            r.hit_tokens == r.device_hit_tokens + r.host_hit_tokens + r.storage_hit_tokens <= r.prompt_tokens
        )
        assert r.hit_tokens % 512 == 0
    assert not any("storage (HiCache L3) not in the grid" in n for n in a.recommendation.notes + a.notes)
    assert any(c.result.hit_tokens >= 4 * 12 * 512 for c in stored)  # rounds 2 and 3 hit the prefixes


def test_a_spec_with_priorities_puts_the_priority_policy_in_the_grid(tmp_path):
    classes = [{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 1, "value": 0}]
    wl = shared_prefix(
        groups=6, prompts_per_group=3, system_prompt_tokens=256, question_tokens=16, output_tokens=8
    )
    plain = write_spec(
        tmp_path, "plain", wl, tokenizer="word", concurrency=1, seeds=[0], api="openai-completions"
    )
    classed = write_spec(
        tmp_path,
        "classed",
        wl,
        tokenizer="word",
        concurrency=1,
        seeds=[0],
        api="openai-completions",
        priorities=classes,
    )
    opts = Options(card="l4", pool=1_000, host_memory_gb=64, workers=1)
    policies = {}
    for path in (plain, classed):
        a = advise(path, opts, check([path], opts))
        policies[path.stem] = {c.config.policy for c in a.candidates}
        assert ("priority not in the grid" in " ".join(a.notes)) == (path is plain)
    assert "priority" not in policies["plain"] and "priority" in policies["classed"]
