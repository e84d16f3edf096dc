"""The lever each pool and host step names (harness.advise.levers), from SGLang 0.5.23's memory chain."""

from __future__ import annotations

import pytest

from harness.advise.levers import Levers
from harness.sim import gpu_memory
from harness.sim.timing import resolve_profile


def _levers(card: str, model: str | None, unit: int = 1) -> Levers:
    return Levers(resolve_profile(card, model), unit, "tokens" if unit == 1 else "blocks")


def test_a_pool_the_default_holds_is_the_cards_default_pool():
    lv = _levers("l4", "Qwen3-0.6B")
    assert lv.profile.default_pool_tokens == 133_628
    lever = lv.pool_lever(29_527)  # the case: --pool 8192 grown to 29,527 tokens
    assert lever is not None and lever.kind == "default" and lever.fraction is None
    assert lever.text.startswith("the card's default pool (133,628 tokens)")
    assert "FP8" not in lever.text and "--mem-fraction-static 0" not in lever.text


@pytest.mark.parametrize(
    ("card", "model"), [("l4", "Qwen3-0.6B"), ("l4", None), ("h100", None), ("h200", None)]
)
def test_each_lever_reaches_its_pool_and_no_less_would(card, model):
    lv = _levers(card, model)
    prof = lv.profile
    hw, shape = prof.hw, prof.shape
    default, top = prof.default_pool_tokens, lv.largest_pool_tokens()
    assert top is not None and top > default
    base, most = gpu_memory.mem_fraction_static(hw), gpu_memory.max_mem_fraction(hw)
    assert base <= most < 1
    kinds = []
    for want in sorted({default + 1, default * 11 // 10, default * 3 // 2, default * 19 // 10, top}):
        lever = lv.pool_lever(want)
        assert lever is not None, want
        kinds.append(lever.kind)
        kv = shape.kv_bytes_per_token // (2 if lever.kind == "fp8" else 1)
        frac = lever.fraction if lever.fraction is not None else base
        assert base <= frac <= most
        assert gpu_memory.pool_tokens(hw, shape, frac, kv_bytes=kv) >= want  # it reaches the target
        if lever.kind == "fraction":  # the smallest fraction that does, to 3 places
            assert gpu_memory.pool_tokens(hw, shape, round(frac - 0.001, 3), kv_bytes=kv) < want
            assert f"--mem-fraction-static {frac:.3f}" in lever.text
        if lever.kind == "fp8":
            assert "--kv-cache-dtype fp8_e4m3" in lever.text
            assert gpu_memory.pool_tokens(hw, shape, most) < want  # bf16 at the largest fraction does not
    assert kinds == sorted(kinds, key=["fraction", "fp8"].index)  # a fraction first, FP8 past it
    assert lv.pool_lever(top + 1) is None and not lv.reachable(top + 1) and lv.reachable(top)


def test_block_units_read_in_blocks_and_tokens():
    lv = _levers("h100", "llama-3.1-8b-instruct", unit=512)
    assert lv.size(1_616) == "1,616 blocks (827,392 tokens)"
    lever = lv.pool_lever(1_616)
    assert lever is not None and lever.kind == "fp8" and lever.fraction is None  # FP8 at the default fraction
    assert lv.host_gb(808, 4.0) == pytest.approx(4 * 808 * 512 * 131_072 / 1e9)
    assert lv.host_lever(808, 4.0, 256) == "--hicache-ratio 4: 216.9 GB of the 256 GB host memory"


def test_a_profile_without_a_card_chain_offers_every_pool_by_its_size():
    lv = Levers(resolve_profile("tiny-test"), 1)
    big = lv.profile.default_pool_tokens * 5
    assert lv.reachable(big) and lv.largest_pool_tokens() is None
    lever = lv.pool_lever(big)
    assert lever is not None and f"--max-total-tokens {big}" in lever.text


def test_a_pool_only_fp8_reaches_has_a_host_tier_of_half_the_bytes_and_says_so():
    """SGLang 0.5.23's host pool takes the device buffers' dtype (mem_cache/pool_host/mha.py)."""
    from harness.advise.levers import FP8_CAVEAT

    lv = _levers("h100", "llama-3.1-8b-instruct", unit=512)
    assert lv.kv_bytes(808) == 131_072 and lv.kv_bytes(1_616) == 65_536
    assert lv.host_gb(1_616, 2.0) == pytest.approx(2 * 1_616 * 512 * 65_536 / 1e9)
    lever = lv.pool_lever(1_616)
    assert lever is not None and FP8_CAVEAT in lever.text
    assert lv.host_lever(1_616, 2.0, 128) == "--hicache-ratio 2: 108.4 GB of the 128 GB host memory"


def test_tp_levers_reach_the_pool_across_the_gpus_and_no_further():
    from harness.advise.levers import tp_pool_tokens

    lv = Levers(resolve_profile("l4", None), 512, "blocks", tp=2)
    most = tp_pool_tokens(lv.profile, 2)
    assert (
        lv.largest_pool_tokens() == most and lv.reachable(most // 512) and not lv.reachable(most // 512 + 1)
    )
    lever = lv.pool_lever(most // 512)
    assert lever is not None and lever.kind == "tp" and lever.text.startswith("--tp 2:")
