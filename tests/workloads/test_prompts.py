"""The bytes each request sends, pinned (issue 29): memory work on schedules, sessions and trace
preparation must leave every body and position as it was (the digests were taken before that work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import specs
from tests.helpers.prompt_digest import bodies_digest

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT / "tests" / "data" / "mooncake" / "conversation_trace.jsonl"
MULTI = specs.multi_turn(sessions=5, turns=4, system_prompt_tokens=16, question_tokens=6, answer_tokens=5)
LOGNORMAL = {"distribution": "lognormal", "mean": 8, "sigma": 0.5}


@pytest.mark.parametrize(
    ("workload", "api", "tokenizer", "digest"),
    [
        (MULTI, "openai-chat", "word", "e5edb966d713fa773f457208fb7e8a8c7082b541"),
        (MULTI, "openai-completions", "word", "3eb6a3603c67012ada9792615b6d7677cf47b794"),
        (MULTI, "sglang-generate", "server", "4607cf4e1fa89326694e64e6dfd14d8828358dce"),
        (
            {**MULTI, "history": "drop-reasoning", "question_tokens": LOGNORMAL},
            "openai-chat",
            "word",
            "16aaca79b395bdd8417acb8cdbfe23dd781ea61c",
        ),
        (
            {"kind": "trace", "path": str(MOONCAKE), "format": "mooncake", "block_tokens": 16, "limit": 400},
            "openai-completions",
            "word",
            "2cb1dad9907605bab43ac232e11f112886575e7a",
        ),
    ],
    ids=["multi-turn-chat", "multi-turn-text", "multi-turn-ids", "multi-turn-drop-lognormal", "mooncake"],
)
def test_request_bodies_unchanged(
    tmp_path: Path, workload: dict, api: str, tokenizer: str, digest: str
) -> None:
    assert bodies_digest(tmp_path, workload, api, tokenizer=tokenizer) == digest
