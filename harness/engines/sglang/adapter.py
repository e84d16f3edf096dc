"""SGLang's adapter, and the sim's (SGLang's surface, launched as `harness serve-sim`)."""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace

from harness.engines.registry import Adapter, Argv, Launch, Marks, register, runtime
from harness.metrics import SGLANG_NAMES
from harness.spec.servers import ServerProfile
from harness.telemetry.gpus import SIM_REASON
from harness.telemetry.timeline import Watch

SGLANG_READY_LINE = "The server is fired up and ready to roll!"
# canonical counter -> engine metric name (Prometheus text from GET metrics_path): harness.metrics
SGLANG_METRICS = SGLANG_NAMES
# sample name -> the per-point timeline's field (harness.telemetry.timeline); cached tokens one field per tier
SGLANG_TIMELINE = Watch(
    counters={
        "sglang:prompt_tokens_total": "prompt_tokens",
        "sglang:generation_tokens_total": "generation_tokens",
        "sglang:num_requests_total": "requests",
        "sglang:evicted_tokens_total": "evicted_tokens",
        "sglang:load_back_tokens_total": "load_back_tokens",
        "sglang:hicache_backup_tokens_total": "backup_tokens",
        "sglang:hicache_dropped_tokens_total": "dropped_tokens",
        "sglang:prefetched_tokens_total": "prefetched_tokens",
        "sglang:backuped_tokens_total": "storage_written_tokens",
        "sglang:num_retracted_requests_total": "retracted",
    },
    gauges={
        "sglang:num_running_reqs": "running",
        "sglang:num_queue_reqs": "queued",
        "sglang:token_usage": "token_usage",
        "sglang:kv_used_tokens": "kv_used_tokens",
        "sglang:kv_evictable_tokens": "kv_evictable_tokens",
        "sglang:kv_available_tokens": "kv_available_tokens",
        "sglang:max_total_num_tokens": "pool_tokens",
        "sglang:hicache_host_used_tokens": "host_used_tokens",
        "sglang:hicache_host_total_tokens": "host_total_tokens",
    },
    split={"sglang:cached_tokens_total": ("cache_source", "cached_", ("device", "host", "storage"))},
)

# a recorded server is SGLang's (or the sim's, which answers like it) by its server_info keys, its flags, or
# `sglang` in its launch line (`-m sglang.launch_server`): the report's default policy (harness.report.common)
SGLANG_MARKS = Marks(
    info_keys=(
        "radix_eviction_policy",
        "disable_radix_cache",
        "chunked_prefill_size",
        "max_total_num_tokens",
    ),
    flags=(
        "--max-total-tokens",
        "--enable-hierarchical-cache",
        "--disable-radix-cache",
        "--mem-fraction-static",
    ),
    words=("sglang",),
)


def _sglang_argv(p: ServerProfile, ln: Launch) -> Argv:
    if not ln.model:
        from harness.errors import HarnessError

        raise HarnessError(
            f"server {p.name}: launch: sglang needs a model (--model M or `model:` in the spec)"
        )
    argv = [sglang_python(p), "-m", "sglang.launch_server", "--model-path", ln.model]
    return argv + ["--host", ln.host, "--port", str(ln.port), *runtime(p.args, ln)]


def sglang_python(p: ServerProfile) -> str:
    """Where SGLang lives: the profile's `python:`, else $HARNESS_SGLANG_PYTHON, else the harness's own."""
    return p.python or os.environ.get("HARNESS_SGLANG_PYTHON") or sys.executable


def _sim_argv(p: ServerProfile, ln: Launch) -> Argv:
    argv = [sys.executable, "-m", "harness", "serve-sim", "--host", ln.host, "--port", str(ln.port)]
    if ln.model:
        argv += ["--model-path", ln.model]
    return argv + runtime(p.args, ln)


SGLANG = register(
    Adapter(
        name="sglang",
        argv=_sglang_argv,
        ready_line=SGLANG_READY_LINE,
        info_paths=("/get_server_info", "/server_info"),
        flush_path="/flush_cache",
        metric_names=SGLANG_METRICS,
        timeline=SGLANG_TIMELINE,
        marks=SGLANG_MARKS,
        default_policy="lru",  # --radix-eviction-policy's default
        # SIGTERM sets a flag that the tokenizer manager's watchdog reads every 5 s (sigterm_watchdog), so a
        # stop took 5.7 s on CPU; SIGINT to the launcher ends uvicorn at once and its scheduler and
        # detokenizer follow (1.8 s). Not to the group: a scheduler given SIGINT exits 1, which the launcher
        # reads as a crash and waits 5 s for crash diagnostics (7.5 s). docs/sglang-facts.md
        stop_signal=signal.SIGINT,
        stop_group=False,
    )
)
SIM = register(
    replace(
        SGLANG,
        name="sim",
        argv=_sim_argv,
        no_gpu=SIM_REASON,
        time_scaled=True,
        stop_signal=signal.SIGTERM,
        stop_group=True,
    )
)  # SGLang's surface, launched as `harness serve-sim`; it models its card on this CPU
