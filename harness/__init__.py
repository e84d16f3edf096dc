"""Benchmark the prefix caches of LLM servers (SGLang's radix cache, eviction policies, HiCache)."""

__version__ = "0.1.0"
