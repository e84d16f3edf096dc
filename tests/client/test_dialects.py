"""SGLang's `priority` field added to every API's body."""

from __future__ import annotations

import json

import pytest

from harness.client.dialects import DIALECTS, with_priority
from harness.workloads.schedule import BuiltPrompt


@pytest.mark.parametrize("api", sorted(DIALECTS))
def test_priority_lands_at_the_top_level_of_every_body(api: str) -> None:
    payload = [{"role": "user", "content": "hi"}] if api == "openai-chat" else "hi there"
    body = DIALECTS[api]().body("m", BuiltPrompt(payload, None, "x"), 4)
    got = json.loads(with_priority(body, -7))
    assert got["priority"] == -7 and {k: v for k, v in got.items() if k != "priority"} == json.loads(body)
