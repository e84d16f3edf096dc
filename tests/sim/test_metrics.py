"""/metrics of a real serve-sim: SGLang's names, cache_source labels that appear on first increment."""

from __future__ import annotations

import random
import re

import httpx
import pytest

from harness.tokenizer import WordTokenizer
from tests.helpers.procs import SimProc

pytestmark = pytest.mark.slow  # every test here starts a process

TOK = WordTokenizer()


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_names_and_cache_source(tmp_path):
    s = SimProc(
        tmp_path, "--card-profile", "tiny-test", "--time-scale", "0.05", "--enable-metrics",
        "--max-total-tokens", "3000", "--enable-hierarchical-cache", "--hicache-ratio", "4",
    )  # fmt: skip
    try:
        text = httpx.get(s.url + "/metrics").text
        for name in (
            "sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
            "sglang:evicted_tokens_total", "sglang:load_back_tokens_total", "sglang:num_running_reqs",
            "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate", "sglang:max_total_num_tokens",
            "sglang:hicache_host_total_tokens", "sglang:hicache_host_used_tokens",
            "sglang:time_to_first_token_seconds_count",
        ):  # fmt: skip
            assert re.search("^" + re.escape(name) + r"[{ ]", text, re.M), name
        assert "# TYPE sglang:cached_tokens_total counter" in text
        assert not re.search(r"^sglang:cached_tokens_total\{", text, re.M)  # no sample before the first hit
        assert sample(text, "sglang:hicache_host_total_tokens") == 12001  # 4 x 3000 + one padding page

        rng = random.Random(0)
        prompts = [TOK.random_words(rng, 800) for _ in range(4)]

        def gen(p: str) -> dict:
            body = {"text": p, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
            return httpx.post(s.url + "/generate", json=body, timeout=30).json()["meta_info"]

        gen(prompts[0])
        again = gen(prompts[0])  # device hit; the hit also backs the prompt up to host (write_through)
        assert again["cached_tokens_details"]["device"] == 799
        for p in prompts[1:]:  # 3 x 800 tokens push prompt 0 out of a 3000-token device pool
            gen(p)
            gen(p)
        back = gen(prompts[0])
        text = httpx.get(s.url + "/metrics").text
        assert sample(text, "sglang:cached_tokens_total", cache_source="device") >= 799
        assert sample(text, "sglang:prompt_tokens_total") == 800 * 9
        assert sample(text, "sglang:num_requests_total") == 9
        assert sample(text, "sglang:generation_tokens_total") == 36
        assert sample(text, "sglang:evicted_tokens_total") > 0
        assert back["cached_tokens_details"]["host"] > 0, back
        assert (
            sample(text, "sglang:cached_tokens_total", cache_source="host")
            == back["cached_tokens_details"]["host"]
        )
        assert sample(text, "sglang:load_back_tokens_total") >= back["cached_tokens_details"]["host"]
        assert sample(text, "sglang:time_to_first_token_seconds_count") == 9
        try:
            from harness.metrics import counter_deltas, parse_prometheus
        except ImportError:
            return
        d = counter_deltas(parse_prometheus(""), parse_prometheus(text))
        assert d is not None
    finally:
        assert s.stop() == 0


def test_metrics_absent_without_flag(tmp_path):
    s = SimProc(tmp_path, "--card-profile", "tiny-test", "--time-scale", "0.05")
    try:
        assert httpx.get(s.url + "/metrics").status_code == 404
    finally:
        s.stop()
