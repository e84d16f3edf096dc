"""Turn a scheduled request plus the answers received so far into what the API is sent.

Cheap string work only (no tokenizing): it runs on the event loop at send time, because turn t's
prompt carries the answers the server actually returned for turns 0..t-1.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.tokenizer import render_chat, strip_reasoning
from harness.workloads.schedule import BuiltPrompt, Conversation, Request, Schedule
from harness.workloads.traffic import salted


@dataclass(slots=True)  # slots: every open session holds one per answered turn
class Turnout:
    """What one finished turn contributes to its session's history."""

    answer: str
    answer_ids: tuple[int, ...] | None = None
    completion_tokens: int | None = None


def context(conv: Conversation, req: Request, history: Sequence[Turnout]) -> list[tuple[Request, Turnout]]:
    """The earlier exchanges this request resends: all of its conversation's so far, or (an agent's
    request) those its lineage names."""
    if req.lineage is None:
        if not history:  # a first turn (every shared-prefix request): nothing to pair
            return []
        return list(zip(conv.turns, history, strict=False))
    return [(conv.turns[i], history[i]) for i in req.lineage]


class PromptBuilder:
    """Chat messages for openai-chat, the sim's chat template rendered as text otherwise, ids for tokenizer: server.

    Expected prompt tokens with the word tokenizer: content tokens + 2 per message + 1 (the template's
    `<|im_start|>ROLE ... <|im_end|>` and generation prompt, see harness.tokenizer). With a HF tokenizer the
    template's own overhead is unknown here, so only content tokens are counted.
    """

    def __init__(self, schedule: Schedule, api: str) -> None:
        self.schedule, self.api = schedule, api
        self.word = schedule.tokenizer == "word"
        self.drop_reasoning = schedule.history == "drop-reasoning"
        self.recorded = schedule.history == "recorded"  # trace conversations: the file's answers

    def build(self, conv: Conversation, req: Request, history: Sequence[Turnout]) -> BuiltPrompt:
        built = self._build(conv, req, history)
        if self.schedule.salt:
            return salted(built, self.schedule.seed, req.index, self.word, self.schedule.salt_words)
        return built

    def _build(self, conv: Conversation, req: Request, history: Sequence[Turnout]) -> BuiltPrompt:
        render = getattr(req.question, "render", None)  # a trace's block or logged prompt
        if render is not None:
            return render(self.api)
        if self.schedule.ids:
            return self._ids(conv, req, history)
        # text from here on: a schedule without ids holds str prompts, which the ignores below stand for
        messages: list[dict[str, str]] = []
        n = 0
        if conv.system_tokens:
            messages.append({"role": "system", "content": conv.system})  # type: ignore[dict-item]
            n += conv.system_tokens
        exact = True
        for prev_req, out in context(conv, req, history):
            ans = strip_reasoning(out.answer) if self.drop_reasoning else out.answer
            if self.recorded:
                ans = prev_req.answer or ""
            messages.append({"role": "user", "content": prev_req.question})  # type: ignore[dict-item]
            messages.append({"role": "assistant", "content": ans})
            n += prev_req.question_tokens
            if self.word:
                n += len(ans.split())
            elif out.completion_tokens is not None and not (self.drop_reasoning or self.recorded):
                n += out.completion_tokens
            else:
                exact = False
        question, q_n = req.question, req.question_tokens
        if req.tool_from is not None:  # an agent's step after a sub-agent: its summary is the tool result
            question = history[req.tool_from].answer
            q_n = len(question.split()) if self.word else 0
            exact = exact and self.word
        messages.append({"role": "user", "content": question})  # type: ignore[dict-item]
        n += q_n
        if self.word:
            n += 2 * len(messages) + 1
        text = render_chat(messages)
        sha = hashlib.sha1(text.encode()).hexdigest()
        payload: Any = messages if self.api == "openai-chat" else text
        return BuiltPrompt(payload, n if exact else None, sha)

    def _ids(self, conv: Conversation, req: Request, history: Sequence[Turnout]) -> BuiltPrompt:
        # a schedule with ids (tokenizer: server) holds tuple prompts, which the ignores below stand for
        ids: list[int] = list(conv.system)  # type: ignore[arg-type]
        for prev_req, out in context(conv, req, history):
            ids.extend(prev_req.question)  # type: ignore[arg-type]
            ids.extend(out.answer_ids or ())
        if req.tool_from is not None:
            ids.extend(history[req.tool_from].answer_ids or ())
        else:
            ids.extend(req.question)  # type: ignore[arg-type]
        sha = hashlib.sha1(array("q", ids).tobytes()).hexdigest()
        return BuiltPrompt(ids, len(ids), sha)
