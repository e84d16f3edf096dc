"""SGLang 0.5.23's memory settings per card (harness.sim.gpu_memory): reserved_mem, mem_fraction_static and
the default pool they leave for an 8B model, worked by hand from the source's formulas."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.sim.args import build_parser
from harness.sim.cards import CARDS
from harness.sim.gpu_memory import mem_fraction_static, pool_tokens, prefill_graph_sizes, reserved_mib
from harness.sim.models import load_model
from harness.sim.sched_records import EngineConfig
from harness.sim.timing import resolve_profile

GIB = 2**30


def test_prefill_graph_sizes_follow_cuda_graph_hook():
    # 8 (4..32 by 4) + 14 (48..256 by 16) + 8 (288..512 by 32) + 8 (576..1024 by 64) + 12 (1280..4096 by 256)
    assert len(prefill_graph_sizes(4096)) == 50 and prefill_graph_sizes(4096)[-1] == 4096
    assert len(prefill_graph_sizes(8192)) == 50 + 8  # + 4608..8192 by 512
    assert prefill_graph_sizes(100) == [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96]


def test_l4_with_llama_8b():
    l4 = CARDS["l4"]
    # chunked prefill 4096, decode max_bs 48: 512 + 1.5 x 4096 + 128 (tp 1) + 2 x 48 + 8 x 50 prefill graphs
    assert reserved_mib(l4) == 512 + 6144 + 128 + 96 + 400 == 7280
    assert mem_fraction_static(l4) == round((22.49 * 1024 - 7280) / (22.49 * 1024), 3) == 0.684
    llama = load_model("Llama-3.1-8B-Instruct")
    assert llama is not None
    expected = int((22.49 * GIB * 0.684 - llama.weight_bytes) // llama.kv_bytes_per_token)
    assert pool_tokens(l4, llama) == expected == resolve_profile("l4").default_pool_tokens == 3490


@pytest.mark.parametrize(
    ("card", "reserved", "fraction", "llama", "qwen3"),
    [
        ("l4", 7280, 0.684, 3490, 926),
        # over 60 GiB: 8192-token chunks, max_bs 256: 512 + 12,288 + 128 + 512 + 8 x 58 = 13,904 (> 10 GiB)
        ("h100", 13904, 0.828, 414_005, 365_828),
        ("a100-80g", 13904, 0.829, 415_332, 367_008),
        ("h200", 13904, 0.903, 911_625, 808_157),
        ("gb10", 13904, 0.887, 747_248, 662_044),
    ],
)
def test_every_card_default(card, reserved, fraction, llama, qwen3):
    hw = CARDS[card]
    assert reserved_mib(hw) == reserved and mem_fraction_static(hw) == fraction
    for model, tokens in (("Llama-3.1-8B-Instruct", llama), ("Qwen3-8B", qwen3)):
        shape = load_model(model)
        assert shape is not None
        by_hand = int((hw.visible_gib * GIB * fraction - shape.weight_bytes) // shape.kv_bytes_per_token)
        assert pool_tokens(hw, shape) == by_hand == tokens
        assert resolve_profile(card, model).default_pool_tokens == tokens


def test_mem_fraction_static_sizes_the_sims_pool():
    def pool(*argv: str) -> int | None:
        return EngineConfig.from_args(build_parser().parse_args(["--card", "l4", *argv])).pool_tokens

    assert pool() == 3490
    # the fraction a 24,094-token L4 pool for Llama-3.1-8B takes: (14.96 GiB of weights + 2.94 GiB of KV)
    # / 22.49 GiB
    assert pool("--mem-fraction-static", "0.796") == pytest.approx(24_094, rel=0.002)
    assert pool("--mem-fraction-static", "0.796", "--max-total-tokens", "24094") == 24_094
    with pytest.raises(HarnessError, match=r"^--mem-fraction-static: 1.5 must be between 0 and 1$"):
        pool("--mem-fraction-static", "1.5")
