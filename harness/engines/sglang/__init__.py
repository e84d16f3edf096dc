"""SGLang (and the sim, which speaks SGLang's surface), in one place: its adapter and its log dialect."""

from harness.engines.sglang.adapter import SGLANG, SGLANG_READY_LINE, SIM, sglang_python

__all__ = ["SGLANG", "SGLANG_READY_LINE", "SIM", "sglang_python"]
