"""Card x model timing from physics (issue 15): model shapes, datasheets, the fitted efficiencies, profiles."""

from __future__ import annotations

import json

import pytest

from harness.errors import HarnessError
from harness.sim.args import build_parser
from harness.sim.cards import CARDS, ETA_BW, ETA_C, FIT_POINTS
from harness.sim.hicache import host_pool_tokens
from harness.sim.models import ModelConfigError, load_model
from harness.sim.timing import get_profile, resolve_profile


@pytest.mark.parametrize(
    "name,total_b,active_b,kv_bytes",
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 8.03, 7.50, 32 * 2 * 8 * 128 * 2),
        ("Qwen/Qwen3-8B", 8.19, 7.57, 36 * 2 * 8 * 128 * 2),
        ("Qwen/Qwen3-0.6B", 0.60, 0.60, 28 * 2 * 8 * 128 * 2),
        ("Qwen/Qwen3-30B-A3B", 30.53, 3.04, 48 * 2 * 4 * 128 * 2),
    ],
)
def test_builtin_shapes_give_the_published_sizes(name, total_b, active_b, kv_bytes):
    s = load_model(name)
    assert s is not None
    assert s.total_params / 1e9 == pytest.approx(total_b, abs=0.01)
    assert s.active_params / 1e9 == pytest.approx(active_b, abs=0.01)
    assert s.kv_bytes_per_token == kv_bytes


def test_local_config_json_is_read(tmp_path):
    cfg = json.loads(load_model_path("qwen3-8b.json").read_text())
    cfg.update(num_hidden_layers=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=512)
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(cfg))
    s = load_model(str(tmp_path / "tiny"))
    assert s is not None and (s.name, s.layers, s.experts, s.active_experts) == ("tiny", 4, 8, 2)
    assert load_model("no/such-model") is None


def test_bad_config_json_names_file_and_key(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 0}))
    with pytest.raises(ModelConfigError, match="num_attention_heads"):
        load_model(str(tmp_path))
    ns_err = _parse_error(["--card", "l4", "--model-path", str(tmp_path)], capsys)
    assert "config.json" in ns_err and "num_attention_heads" in ns_err


def load_model_path(name: str):
    from harness.sim.models import BUILTIN_DIR

    return BUILTIN_DIR / name


def _parse_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_fit_uses_several_cited_points_and_stays_physical():
    decode = [m for m, _ in FIT_POINTS if m.kind == "decode"]
    prefill = [m for m, _ in FIT_POINTS if m.kind == "prefill"]
    assert len({m.card for m in decode}) >= 3 and len({m.card for m in prefill}) >= 2
    assert all(m.source and m.measured_s > 0 for m, _ in FIT_POINTS)
    assert 0.5 < ETA_BW < 1.0 and 0.15 < ETA_C < 0.7
    for m, eff in FIT_POINTS:  # no point is more than a factor 1.7 from the fitted efficiency
        fitted = ETA_BW if m.kind == "decode" else ETA_C
        assert 1 / 1.7 < eff / fitted < 1.7, (m.what, eff, fitted)


def test_decode_is_weights_plus_kv_over_bandwidth():
    p = resolve_profile("h100", "Llama-3.1-8B-Instruct")
    s, bw = p.shape, ETA_BW * 3350e9
    assert p.decode_time(1, 0) == pytest.approx(s.step_weight_bytes(1) / bw + 15e-6)
    extra = p.decode_time(1, 100_000) - p.decode_time(1, 0)
    assert extra == pytest.approx(100_000 * s.kv_bytes_per_token / bw)
    # twice the bandwidth (H200 vs H100, same FLOPs), less than half the weight time... exactly the ratio
    h200 = resolve_profile("h200", "Llama-3.1-8B-Instruct")
    assert (p.decode_time(1, 0) - 15e-6) / (h200.decode_time(1, 0) - 15e-6) == pytest.approx(4800 / 3350)


def test_moe_decode_reads_only_routed_experts():
    moe = resolve_profile("h100", "Qwen/Qwen3-30B-A3B")
    dense = resolve_profile("h100", "Qwen/Qwen3-8B")
    assert moe.shape.weight_bytes > 3 * dense.shape.weight_bytes
    assert moe.decode_time(1, 0) < 0.5 * dense.decode_time(1, 0)  # 8 of 128 experts per token
    assert moe.decode_time(64, 0) > 4 * moe.decode_time(1, 0)  # a batch routes to most experts


def test_prefill_scales_with_sm_clock_and_has_a_weight_floor():
    full = resolve_profile("l4", "Qwen/Qwen3-8B", 2040)
    half = resolve_profile("l4", "Qwen/Qwen3-8B", 1020)
    big = [(4096, 0)]
    assert (half.batch_prefill_time(big) - half.prefill_overhead_s) == pytest.approx(
        2 * (full.batch_prefill_time(big) - full.prefill_overhead_s)
    )
    # one token cannot be faster than reading the weights once
    one = full.batch_prefill_time([(1, 0)]) - full.prefill_overhead_s
    assert one == pytest.approx(full.shape.step_weight_bytes(1) / full.bw)
    assert resolve_profile("l4", "Qwen/Qwen3-8B").sm_clock_mhz == CARDS["l4"].sm_typical_mhz


def test_prefill_and_decode_clocks_split():
    """A card that runs its prefills at one clock and decode at another (issue 38): each step type
    takes its own; --sim-sm-clock-mhz sets both, the split flags one apart."""
    both = resolve_profile("l4", "Qwen/Qwen3-8B", 788)
    split = resolve_profile("l4", "Qwen/Qwen3-8B", prefill_sm_clock_mhz=1900, decode_sm_clock_mhz=788)
    fast = resolve_profile("l4", "Qwen/Qwen3-8B", 1900)
    big = [(4096, 0)]
    assert split.batch_prefill_time(big) == pytest.approx(fast.batch_prefill_time(big))
    assert split.batch_prefill_time(big) < both.batch_prefill_time(big) / 2
    # a compute-bound decode step (a big batch) runs at the decode clock; a memory-bound one ignores clocks
    assert split.decode_time(1024, 0) == pytest.approx(both.decode_time(1024, 0))
    assert split.decode_time(1024, 0) > fast.decode_time(1024, 0) * 2
    assert split.decode_time(1, 0) == pytest.approx(fast.decode_time(1, 0))
    assert "at 1900/2040 MHz, decode at 788 MHz" in split.describe()
    assert "decode at" not in fast.describe()
    ns = build_parser().parse_args(
        ["--card", "l4", "--sim-sm-clock-mhz", "1500", "--sim-decode-sm-clock-mhz", "465"]
    )
    assert (ns.sim_profile.sm_clock_mhz, ns.sim_profile.decode_sm_clock_mhz) == (1500, 465)
    ns = build_parser().parse_args(["--card", "l4", "--sim-prefill-sm-clock-mhz", "1900"])
    assert (ns.sim_profile.sm_clock_mhz, ns.sim_profile.decode_sm_clock_mhz) == (
        1900,
        CARDS["l4"].sm_typical_mhz,
    )


def test_aliases_and_model_path():
    legacy = get_profile("l4-8b")
    assert legacy.hw is CARDS["l4"] and legacy.model == "Llama-3.1-8B-Instruct"
    assert resolve_profile("l4-8b", "Qwen/Qwen3-8B").model == "Qwen3-8B"
    assert get_profile("tiny-test").name == "tiny-test"
    warnings: list[str] = []
    p = resolve_profile("h200-8b", "some/unknown-model", warn=warnings.append)
    assert p.model == "Llama-3.1-8B-Instruct" and "unknown-model" in warnings[0]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--card", "v100"], "unknown card 'v100'"),
        (["--card", "l4", "--model-path", "Qwen/Qwen3-30B-A3B"], "do not fit NVIDIA L4"),
        (["--card", "l4", "--sim-sm-clock-mhz", "5000"], "--sim-sm-clock-mhz"),
        (["--card", "l4", "--sim-decode-sm-clock-mhz", "0"], "--sim-decode-sm-clock-mhz: 0 is outside"),
        (["--card", "l4", "--sim-prefill-sm-clock-mhz", "9999"], "--sim-prefill-sm-clock-mhz"),
    ],
)
def test_bad_card_input_is_one_line(argv, needle, capsys):
    msg = _parse_error(argv, capsys)
    assert needle in msg and "\n" not in msg.strip()


def test_serve_sim_flags_pick_card_and_model():
    ns = build_parser().parse_args(
        ["--card", "l4", "--model-path", "Qwen/Qwen3-8B", "--max-total-tokens", "24094"]
    )
    assert ns.sim_profile.name == "l4/Qwen3-8B" and ns.card_profile == "l4"
    ns = build_parser().parse_args(["--card-profile", "h200-8b"])
    assert ns.sim_profile.name == "h200/Llama-3.1-8B-Instruct"


def test_default_pool_follows_sglangs_rule():
    p = resolve_profile("h100", "Llama-3.1-8B-Instruct")
    # reserved_mem: 512 MiB + 1.5 MiB x 8,192 chunked-prefill tokens + 128 MiB (tp 1) + 2 MiB x 256 decode
    # CUDA-graph batches + 8 MiB x 58 prefill graphs = 13,904 MiB (over the 10 GiB floor);
    # mem_fraction_static = round((79.1 GiB - 13,904 MiB) / 79.1 GiB, 3) = 0.828 of memory, less the weights
    expected = int((79.1 * 2**30 * 0.828 - p.shape.weight_bytes) // p.kv_bytes_per_token)
    assert p.default_pool_tokens == expected
    assert p.chunked_prefill_size == 8192 and get_profile("l4").chunked_prefill_size == 4096


def test_gb10_host_tier_comes_from_the_same_memory():
    p = resolve_profile("gb10", "Qwen/Qwen3-8B")
    small, big = 100_000, 500_000
    assert p.host_memory_bytes(big) < p.host_memory_bytes(small)
    kv = p.kv_bytes_per_token
    # a small device pool leaves room for the default 2x host pool; SGLang's default pool leaves none
    assert (
        host_pool_tokens(small, kv_bytes_per_token=kv, host_memory_bytes=p.host_memory_bytes(small))[1] == 2.0
    )
    with pytest.raises(ValueError, match="10 GiB reserve"):
        host_pool_tokens(
            p.default_pool_tokens,
            kv_bytes_per_token=kv,
            host_memory_bytes=p.host_memory_bytes(p.default_pool_tokens),
        )
    assert resolve_profile("h100", "Qwen/Qwen3-8B").host_memory_bytes(small) == 256e9


def test_load_back_uses_the_host_link():
    p = resolve_profile("l4", "Qwen/Qwen3-8B")
    assert p.load_back_time(10_000) == pytest.approx(10_000 * p.kv_bytes_per_token / 25e9)
    assert resolve_profile("gb10", "Qwen/Qwen3-8B").load_back_time(10_000) < p.load_back_time(10_000)


def test_unknown_card_error():
    with pytest.raises(HarnessError, match="known: l4"):
        resolve_profile("x100")


@pytest.mark.parametrize("card", ["h100", "l4-8b", "tiny-test"])
def test_array_forms_give_the_very_floats_of_the_scalar_ones(card):
    """advise costs a large trace's requests as arrays (prefill_times, load_back_times): bit for bit the
    scalar per-request figures, so its output does not move."""
    import numpy as np

    p = get_profile(card) if card == "tiny-test" else resolve_profile(card)
    rng = np.random.default_rng(0)
    new = np.concatenate([rng.integers(-3, 200_000, 2000), [0, 1, 2]]).astype(np.int64)
    cached = rng.integers(0, 500_000, len(new)).astype(np.int64)
    got = p.prefill_times(new, cached).tolist()
    assert got == [p.prefill_time(n, c) for n, c in zip(new.tolist(), cached.tolist(), strict=True)]
    assert p.load_back_times(cached - 1000).tolist() == [
        p.load_back_time(t) for t in (cached - 1000).tolist()
    ]
