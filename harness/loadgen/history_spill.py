"""Idle sessions' histories in a spill file: a round-robin multi-turn run keeps none of them in RAM.

Between two turns a session's system prompt, questions and answers (with the answer token ids,
tokenizer: server) go to an append-only temp file (harness.workloads.spill) as a chain of records,
one per turn: each holds its turn's exchange and the offset of the session's record before it (the
first one the system prompt). The run keeps one offset per session; a turn is read back (the chain
walked from the newest record) only when the session's next turn is queued.
"""

from __future__ import annotations

import marshal
import struct
from typing import Any

from harness.workloads.prompts import Turnout
from harness.workloads.schedule import Prompt
from harness.workloads.session_turns import Answers
from harness.workloads.spill import SpillFile, pack_ids, unpack_ids

_LEN = struct.Struct("<I")
_GUESS = 512  # bytes read at once: one read for most records (a second for longer ones)


class HistorySpill:
    """Append a session's turn (`save`), get the chain's new head; `load` a head back as the history."""

    def __init__(self) -> None:
        self.file = SpillFile()

    def save(
        self, prev: int, system: tuple[Prompt, int] | None, question: Prompt, q_tokens: int, out: Turnout
    ) -> int:
        """One turn's record after `prev` (-1: the session's first, which carries its system prompt)."""
        ids = pack_ids(out.answer_ids) if out.answer_ids is not None else None
        if isinstance(question, tuple):
            question = pack_ids(question)  # type: ignore[assignment]
        data = marshal.dumps((prev, system, question, q_tokens, out.answer, ids, out.completion_tokens))
        return self.file.append(_LEN.pack(len(data)) + data)

    def _record(self, at: int) -> tuple[Any, ...]:
        raw = self.file.read(at, _GUESS)
        (n,) = _LEN.unpack_from(raw)
        if n + _LEN.size > len(raw):
            raw += self.file.read(at + len(raw), n + _LEN.size - len(raw))
        rec: tuple[Any, ...] = marshal.loads(raw[_LEN.size : _LEN.size + n])
        return rec

    def load(self, head: int) -> tuple[tuple[Prompt, int], list[tuple[Prompt, int]], Answers]:
        """(system prompt and tokens, each turn's question and tokens, the answers) of the chain at head."""
        chain = []
        at = head
        while at >= 0:
            rec = self._record(at)
            chain.append(rec)
            at = rec[0]
        chain.reverse()
        system: tuple[Prompt, int] = chain[0][1]
        questions: list[tuple[Prompt, int]] = []
        history = Answers()
        for _, _, q, q_n, answer, ids, comp in chain:
            questions.append((unpack_ids(q) if isinstance(q, bytes) else q, q_n))
            history.append(Turnout(answer, unpack_ids(ids) if ids is not None else None, comp))
        return system, questions, history

    def close(self) -> None:
        self.file.close()
