"""take_usage: what the server said about a request goes into its record, SGLang's retractions included."""

from __future__ import annotations

from harness.capture.records import RequestRecord
from harness.client.dialects import StreamState
from harness.client.verdict import take_usage


def record(usage: dict | None) -> RequestRecord:
    rec = RequestRecord(experiment="e", server="s", point="p", seed=0, index=0)
    st = StreamState()
    st.usage = usage
    take_usage(rec, st)
    return rec


def test_num_retractions_from_sglang_meta_info() -> None:
    meta = {"prompt_tokens": 100, "completion_tokens": 600, "cached_tokens": 0, "num_retractions": 1}
    rec = record(meta)
    assert rec.num_retractions == 1 and rec.prompt_tokens == 100
    assert record({**meta, "num_retractions": 0}).num_retractions == 0
    assert (
        record({"prompt_tokens": 3, "completion_tokens": 1}).num_retractions is None
    )  # OpenAI usage: unsaid
