"""One sha1 over every request body a schedule sends, in send order, with made-up answers: pinned in
tests so that memory work on the workloads (issue 29) cannot change a byte of any prompt."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from harness.client.dialects import get_dialect
from harness.spec import load_spec
from harness.workloads import PromptBuilder, build_schedule
from harness.workloads.prompts import Turnout
from harness.workloads.session_turns import Answers
from tests.helpers import specs


def answer(conv: int, turn: int) -> Turnout:
    """A fixed answer per (conversation, turn), as if the server had returned it."""
    text = " ".join(f"a{conv}x{turn}w{k}" for k in range(5))
    return Turnout(answer=text, answer_ids=(conv, turn, 7), completion_tokens=5)


def bodies_digest(folder: Path, workload: dict[str, Any], api: str, **top: Any) -> str:
    """sha1 over each request's body, request index and position, in nominal send order."""
    spec = load_spec(specs.write_spec(folder, "digest", workload, api=api, **top))
    sch = build_schedule(spec, None, 0)
    builder, dialect = PromptBuilder(sch, api), get_dialect(api)
    convs = {c.id: c for c in sch.conversations}
    history: dict[int, Answers] = {}  # what a run's sessions hold
    h = hashlib.sha1()
    for req in sch.requests():
        conv = convs[req.conversation]
        done = history.setdefault(conv.id, Answers())
        body = dialect.body(spec.model, builder.build(conv, req, done), req.output_tokens)
        h.update(b"%d %d %d\n" % (req.index, req.position, len(body)))
        h.update(body)
        done.append(answer(conv.id, req.turn))
    return h.hexdigest()
