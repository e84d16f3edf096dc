"""SGLang 0.5.23 log lines, to stderr and --log-file, so the harness's log parser reads the sim like SGLang.

Formats (docs/sglang-facts.md): `[%Y-%m-%d %H:%M:%S] message`; the KV pool, host pool,
`max_total_num_tokens=...` and ready lines at startup; one `Prefill batch, ...` line per prefill
batch and one `Decode batch, ...` line every --decode-log-interval decode steps.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
GRAPH = "cuda graph"


def stamp(t: float | None = None) -> str:
    return time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime(time.time() if t is None else t))


def prefill_line(
    *,
    new_seq: int,
    new_token: int,
    cached_token: int,
    token_usage: float,
    running_req: int,
    queue_req: int,
    pending_token: int,
    input_throughput: float,
    graph: bool = True,
) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
        f"token usage: {token_usage:.2f}, #running-req: {running_req}, #queue-req: {queue_req}, "
        f"#pending-token: {pending_token}, {GRAPH}: {graph}, input throughput (token/s): {input_throughput:.2f}"
    )


def decode_line(
    *,
    running_req: int,
    token: int,
    token_usage: float,
    gen_throughput: float,
    queue_req: int,
    graph: bool = True,
) -> str:
    return (
        f"Decode batch, #running-req: {running_req}, #token: {token}, token usage: {token_usage:.2f}, "
        f"{GRAPH}: {graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue_req}"
    )


def kv_pool_line(tokens: int, kv_bytes_per_token: int) -> str:
    half_gb = tokens * kv_bytes_per_token / 2 / (1 << 30)
    return f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tokens}, K size: {half_gb:.2f} GB, V size: {half_gb:.2f} GB"


def host_pool_line(tokens: int, kv_bytes_per_token: int) -> str:
    gb = tokens * kv_bytes_per_token / (1 << 30)
    return f"Allocating kv hierarchical KV host pool: {tokens} tokens, {gb:.2f} GB host memory."


def scheduler_line(
    *,
    max_total_num_tokens: int,
    chunked_prefill_size: int,
    max_prefill_tokens: int,
    max_running_requests: int,
    context_len: int,
    available_gpu_mem: float,
) -> str:
    return (
        f"max_total_num_tokens={max_total_num_tokens}, chunked_prefill_size={chunked_prefill_size}, "
        f"max_prefill_tokens={max_prefill_tokens}, max_running_requests={max_running_requests}, "
        f"context_len={context_len}, available_gpu_mem={available_gpu_mem:.2f} GB"
    )


READY_LINE = "The server is fired up and ready to roll!"
FLUSH_OK_LINE = "Cache flushed successfully!"


def flush_refused_line(queue_req: int, running_req: int) -> str:
    return f"Cache not flushed because there are pending requests. #queue-req: {queue_req}, #running-req: {running_req}"


class SimLogger:
    """Writes timestamped lines to stderr and, if given, appends them (flushed) to a log file."""

    def __init__(
        self, level: str = "info", log_file: str | None = None, stream: IO[str] | None = None
    ) -> None:
        self.level = LEVELS.get(level, 20)
        self.stream = stream if stream is not None else sys.stderr
        self.file: IO[str] | None = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, message: str, level: str = "info") -> None:
        if LEVELS.get(level, 20) < self.level:
            return
        line = f"{stamp()} {message}\n"
        with self._lock:
            for out in (self.stream, self.file):
                if out is None:
                    continue
                try:
                    out.write(line)
                    out.flush()
                except (OSError, ValueError):
                    pass

    def info(self, message: str) -> None:
        self.write(message, "info")

    def warning(self, message: str) -> None:
        self.write(message, "warning")

    # EngineLog protocol
    def prefill(self, **fields: Any) -> None:
        self.info(prefill_line(**fields))

    def decode(self, **fields: Any) -> None:
        self.info(decode_line(**fields))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
