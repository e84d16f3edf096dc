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


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
def test_ignore_eos_false_leaves_the_field_out_of_openai_bodies(api: str) -> None:
    """A strict OpenAI server (transformers serve) refuses unknown fields: the spec's `ignore_eos: false`."""
    from harness.client.dialects import get_dialect
    from harness.spec.load import parse_load_settings

    payload = [{"role": "user", "content": "hi"}] if api == "openai-chat" else "hi there"
    prompt = BuiltPrompt(payload, None, "x")
    default = json.loads(get_dialect(api).body("m", prompt, 4))
    strict = json.loads(get_dialect(api, ignore_eos=False).body("m", prompt, 4))
    assert default["ignore_eos"] is True and "ignore_eos" not in strict
    assert {k: v for k, v in default.items() if k != "ignore_eos"} == strict
    load = parse_load_settings({"ignore_eos": False}, "s.yaml", False, "shared-prefix")
    assert load.ignore_eos is False and parse_load_settings({}, "s.yaml", False, "shared-prefix").ignore_eos
    with pytest.raises(Exception, match="s.yaml: ignore_eos: expected true or false, got 'no'"):
        parse_load_settings({"ignore_eos": "no"}, "s.yaml", False, "shared-prefix")
