"""A real server nobody here wrote: llama.cpp's llama-server, built from a pinned sdist, plus a tiny model."""

from __future__ import annotations

LLAMA_CPP_VERSION = "0.3.36"
