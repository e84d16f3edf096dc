"""Streaming requests: one SSE parser, thin dialects for OpenAI chat/completions and SGLang /generate."""

from harness.client.dialects import DIALECTS, Dialect, StreamState, get_dialect
from harness.client.sse import SSEParser
from harness.client.stream import stream_request

__all__ = ["DIALECTS", "Dialect", "SSEParser", "StreamState", "get_dialect", "stream_request"]
