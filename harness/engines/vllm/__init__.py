"""vLLM, in one place: its adapter (launch line, reset, metric names, settle wait) and its CPU venv."""

from harness.engines.vllm.adapter import VLLM, VLLM_FLAGS, VLLM_RESET_PATH, vllm_python

__all__ = ["VLLM", "VLLM_FLAGS", "VLLM_RESET_PATH", "vllm_python"]
