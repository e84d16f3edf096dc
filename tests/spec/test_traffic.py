"""The traffic keys any workload takes: `priorities:` and `salt:`, parsed, and refused with one line each."""

from __future__ import annotations

from typing import Any

import pytest

from harness.errors import SpecError
from harness.spec import parse_spec
from harness.spec.traffic import PriorityClass
from tests.helpers.specs import multi_turn, spec

WL = multi_turn(sessions=4, turns=2, system_prompt_tokens=8, question_tokens=4, answer_tokens=4)


def parsed(**top: Any):
    return parse_spec(spec("t", WL, **top), "t.yaml")


def test_priorities_and_salt_parse() -> None:
    s = parsed(
        api="openai-completions",
        priorities=[{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 3, "value": -5}],
        salt="per-request",
    )
    assert s.priorities == (PriorityClass("high", 1.0, 10), PriorityClass("low", 3.0, -5))
    assert s.salt == "per-request"
    assert parsed().priorities == () and parsed().salt is None


BAD = [
    ({"priorities": []}, "priorities", "expected a non-empty list"),
    ({"priorities": {"high": 1}}, "priorities", "expected a non-empty list"),
    ({"priorities": ["high"]}, "priorities[0]", "expected a mapping with name, share and value"),
    ({"priorities": [{"name": "h", "share": 1}]}, "priorities[0].value", "missing (required)"),
    ({"priorities": [{"name": "h", "share": 0, "value": 1}]}, "priorities[0].share", "got 0"),
    ({"priorities": [{"name": "h", "share": "half", "value": 1}]}, "priorities[0].share", "got 'half'"),
    ({"priorities": [{"name": "h", "share": 1, "value": 1.5}]}, "priorities[0].value", "got 1.5"),
    ({"priorities": [{"name": "h", "share": 1, "value": 2**63}]}, "priorities[0].value", "an integer"),
    ({"priorities": [{"name": "a b", "share": 1, "value": 1}]}, "priorities[0].name", "got 'a b'"),
    (
        {"priorities": [{"name": "h", "share": 1, "value": 1, "colour": 2}]},
        "priorities[0].colour",
        "unknown key",
    ),
    (
        {"priorities": [{"name": "h", "share": 1, "value": 1}, {"name": "h", "share": 1, "value": 2}]},
        "priorities[1].name",
        "already used",
    ),
    (
        {"salt": "per-session", "api": "openai-completions"},
        "salt",
        "expected one of per-request, got 'per-session'",
    ),
    ({"salt": "per-request"}, "salt", "with openai-chat the server's chat template"),
]


@pytest.mark.parametrize(("top", "key", "words"), BAD, ids=[b[1] + ":" + b[2][:20] for b in BAD])
def test_bad_traffic_keys_one_line(top: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        parsed(**top)
    msg = str(e.value)
    assert msg.startswith(f"t.yaml: {key}: ") and words in msg and "\n" not in msg, msg
