"""llama.cpp's `llama-server`, launched as a `launch: command` profile with `engine: llama.cpp`."""

from __future__ import annotations

from harness.engines.registry import Adapter, command_argv, register

LLAMACPP_METRICS = {
    "prompt_tokens": "llamacpp:prompt_tokens_total",
    "generation_tokens": "llamacpp:tokens_predicted_total",
    "requests": "llamacpp:requests_processing",
}

LLAMACPP = register(
    Adapter(
        name="llama.cpp",
        argv=command_argv,
        ready_line=None,  # /health answers 503 while loading, 200 once the model serves
        info_paths=("/props",),
        flush_path=None,  # no cache reset endpoint: points are only comparable on a fresh server
        metric_names=LLAMACPP_METRICS,
    )
)
