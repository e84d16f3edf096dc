"""Spec files written for a test: the keys every test spec shares live here once, so a test states only
what it varies (its workload's sizes, the servers, a sweep) and every spec is written the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SIM_FAST = [
    "--card-profile",
    "tiny-test",
    "--time-scale",
    "0.05",
]  # a sim whose points take well under a second
TIMEOUTS = {"connect": 5, "first_token": 30, "total": 60}


def shared_prefix(
    *,
    groups: int = 2,
    prompts_per_group: int = 4,
    system_prompt_tokens: int = 64,
    question_tokens: int = 8,
    output_tokens: int = 8,
    **more: Any,
) -> dict[str, Any]:
    """A shared-prefix workload (groups of prompts behind one system prompt each)."""
    return {
        "kind": "shared-prefix",
        "groups": groups,
        "prompts_per_group": prompts_per_group,
        "system_prompt_tokens": system_prompt_tokens,
        "question_tokens": question_tokens,
        "output_tokens": output_tokens,
        **more,
    }


def multi_turn(
    *,
    sessions: int,
    turns: int,
    system_prompt_tokens: int,
    question_tokens: int,
    answer_tokens: int,
    **more: Any,
) -> dict[str, Any]:
    """A multi-turn workload (sessions whose turns carry the conversation so far)."""
    return {
        "kind": "multi-turn",
        "sessions": sessions,
        "turns": turns,
        "system_prompt_tokens": system_prompt_tokens,
        "question_tokens": question_tokens,
        "answer_tokens": answer_tokens,
        **more,
    }


def spec(
    name: str, workload: dict[str, Any], *, api: str = "openai-chat", model: str = "default", **top: Any
) -> dict[str, Any]:
    """A spec's mapping: its name, API, model and workload, then `top` (concurrency, seeds, sweep, servers, ...)."""
    return {"name": name, "api": api, "model": model, "workload": workload, **top}


def write_yaml(path: Path, raw: dict[str, Any]) -> Path:
    """Write a mapping as YAML, keys in the order given (as a person writes a spec)."""
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def write_spec(
    folder: Path, name: str, workload: dict[str, Any], *, file: str | None = None, **top: Any
) -> Path:
    """spec(name, workload, **top) written to folder/<file or name.yaml>."""
    return write_yaml(folder / (file or f"{name}.yaml"), spec(name, workload, **top))


def bench_spec(
    folder: Path, mark: str, *, name: str = "tiny", servers: list[dict[str, Any]] | None = None, **over: Any
) -> Path:
    """A two-point sweep on a fast sim for `harness bench`; every server carries BENCH_TEST_MARK=mark in its
    environment, so a test can find by that mark any server process that outlived the run."""
    top = {
        "tokenizer": "word",
        "concurrency": 4,
        "seeds": [0],
        "sweep": {"groups": [1, 2]},
        "timeouts": dict(TIMEOUTS),
        **over,
    }
    raw = spec(name, top.pop("workload", shared_prefix()), **top)
    raw["servers"] = servers or [{"name": "s", "launch": "sim", "args": list(SIM_FAST)}]
    for s in raw["servers"]:
        s.setdefault("env", {})["BENCH_TEST_MARK"] = mark
    return write_yaml(folder / f"{name}.yaml", raw)
