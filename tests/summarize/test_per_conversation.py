"""Per-conversation hit rates (issue 59 item 5): token-weighted p10/p50/p90 of each conversation's own
rate, in a point's figures; a thrashing conversation shows in p10 while the overall rate hides it."""

from __future__ import annotations

import pytest

from harness.summarize.figures import request_figures
from harness.whatif.per_conversation import per_conversation_hit_rate


def test_token_weighted_percentiles() -> None:
    # three conversations: 10 % (1,000 tokens), 50 % (1,000), 90 % (8,000 tokens: most of the weight)
    rows = [("a", 50, 500), ("a", 50, 500), ("b", 500, 1000), ("c", 7200, 8000), (None, 0, 99)]
    got = per_conversation_hit_rate(rows)
    assert got == {"p10": 0.1, "p50": pytest.approx(0.9), "p90": pytest.approx(0.9), "conversations": 3}
    assert per_conversation_hit_rate([(None, 1, 2)]) is None  # no conversations: no distribution


def test_figures_show_a_thrashing_session_the_average_hides() -> None:
    def rec(session: int | None, prompt: int, cached: int) -> dict:
        return {
            "ok": True,
            "session": session,
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "ttft_s": 0.1,
        }

    rows = [rec(s, 1000, 950) for s in range(9) for _ in range(2)] + [rec(9, 1000, 0), rec(9, 1000, 0)]
    fig = request_figures(rows)
    assert fig["hit_rate_usage"] == pytest.approx(0.855)
    pc = fig["per_conversation_hit_rate"]
    assert pc == {"p10": 0.0, "p50": pytest.approx(0.95), "p90": pytest.approx(0.95), "conversations": 10}
    assert request_figures([rec(None, 100, 10)]).per_conversation_hit_rate is None  # no sessions: absent
