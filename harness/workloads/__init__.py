"""Workload generators: deterministic request schedules from a spec, a seed and a tokenizer."""

from __future__ import annotations

from harness.spec import AgentWorkload, ExperimentSpec, MultiTurnWorkload, TraceWorkload, Workload
from harness.tokenizer import Tokenizer
from harness.workloads.generators import multi_turn, shared_prefix
from harness.workloads.prompts import PromptBuilder
from harness.workloads.schedule import Conversation, Prompt, Request, Schedule
from harness.workloads.tokenizers import PromptMaker, load_prompt_maker
from harness.workloads.traffic import apply_traffic

__all__ = [
    "Conversation",
    "Prompt",
    "PromptBuilder",
    "PromptMaker",
    "Request",
    "Schedule",
    "build_schedule",
    "load_prompt_maker",
]


def build_schedule(
    spec: ExperimentSpec,
    workload: Workload | None,
    seed: int,
    tokenizer: PromptMaker | Tokenizer | str | None = None,
) -> Schedule:
    """The whole schedule for one point x seed; all tokenizing happens here, before the run."""
    wl = workload or spec.workload
    if isinstance(tokenizer, PromptMaker):
        maker = tokenizer
    elif tokenizer is None or isinstance(tokenizer, str):
        maker = load_prompt_maker(tokenizer or spec.tokenizer)
    else:  # a harness.tokenizer.Tokenizer object, e.g. WordTokenizer()
        maker = load_prompt_maker(getattr(tokenizer, "name", spec.tokenizer))
    f = str(spec.source_path)
    if isinstance(wl, TraceWorkload):
        from harness.workloads.traces import trace_schedule

        schedule = trace_schedule(wl, seed, maker, f, spec.api)
    elif isinstance(wl, MultiTurnWorkload):
        schedule = multi_turn(wl, seed, maker, f)
    elif isinstance(wl, AgentWorkload):
        from harness.workloads.agent import agent

        schedule = agent(wl, seed, maker, f)
    else:
        schedule = shared_prefix(wl, seed, maker, f)
    return apply_traffic(schedule, spec.priorities, spec.salt, seed, maker)
