"""The summary's split by tier: the copy seconds of host and storage hits on the card server_info states."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.sim.storage import BACKENDS
from harness.sim.tier_time import host_hit_s, storage_hit_s
from harness.sim.timing import resolve_profile
from harness.summarize.read import SeedCapture
from harness.summarize.tiers import tier_figures, tier_seconds
from harness.summary.figures import Figures

L4 = resolve_profile("l4")  # Llama-3.1-8B: 131,072 KV bytes per token, 25 GB/s host link


def _info(**kw) -> dict:
    return {"card": L4.to_dict(), "page_size": 1, **kw}


def test_host_and_storage_seconds_are_the_tier_time_model_on_the_stated_card():
    fig = Figures(cached_host_tokens=2048, cached_storage_tokens=4096)
    out = tier_seconds(fig, _info(hicache_storage_backend="file"))
    assert out["host_tier_seconds"] == pytest.approx(host_hit_s(2048, L4))  # 10.7 ms
    assert out["host_tier_seconds"] == pytest.approx(2048 * 131_072 / 25e9)
    assert out["storage_tier_seconds"] == pytest.approx(storage_hit_s(4096, L4, BACKENDS["file"], 1))
    # fp8 KV moves half the bytes; no storage backend, no storage seconds
    half = tier_seconds(fig, _info(kv_cache_dtype="fp8_e5m2"))
    assert half == {"host_tier_seconds": pytest.approx(out["host_tier_seconds"] / 2)}


def test_no_card_no_seconds():
    fig = Figures(cached_host_tokens=2048)
    assert tier_seconds(fig, None) == {}
    assert tier_seconds(fig, {"version": "0.5.23"}) == {}  # a real server states no card
    assert tier_seconds(fig, {"card": {"h2d_gb_per_s": 0, "kv_bytes_per_token": 1}}) == {}


def test_tier_figures_carry_them():
    sc = SeedCapture(Path("."), "hicache", 0, {}, None, [], None, None, None)
    fig = Figures(cached_tokens=3000, cached_device_tokens=952, cached_host_tokens=2048)
    out = tier_figures(fig, sc, _info())
    assert out["tiers_add_up_usage"] is True
    assert out["host_tier_seconds"] == pytest.approx(host_hit_s(2048, L4))
    assert "host_tier_seconds" not in tier_figures(fig, sc)
