"""The zero-reuse control's flag: a salted request that found more than one page cached."""

from __future__ import annotations

from harness.verdicts.zero_reuse import cached_of, salted_hits


def test_within_a_page_is_not_flagged() -> None:
    rows = [
        {"ok": True, "cached_tokens": None},
        {"ok": True, "cached_tokens": 16},
        {"ok": False, "cached_tokens": 900},
    ]
    assert salted_hits(rows, 16) is None


def test_more_than_a_page_is_flagged_with_counts() -> None:
    rows = [
        {"ok": True, "cached_tokens": 2},
        {"ok": True, "cached_tokens": 0},
        {"ok": True, "cached_tokens": 40},
    ]
    why = salted_hits(rows, None)  # no page size known: one token
    assert why is not None and why.startswith(
        "2 of 3 salted requests found more than one page (1 tokens) cached (up to 40)"
    )
    assert salted_hits(rows, 64) is None


def test_llama_cpp_timings_count_when_usage_does_not_say() -> None:
    assert cached_of({"server_timings": {"cache_n": 7}}) == 7 and cached_of({}) == 0
    assert salted_hits([{"ok": True, "server_timings": {"cache_n": 3}}], 1) is not None
