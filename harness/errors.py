"""Errors a user can fix: the CLI prints them as one line and exits 2, never a traceback."""

from __future__ import annotations


class HarnessError(Exception):
    """Bad input or an unusable environment; the message names the culprit (file, key, value)."""

    exit_code = 2


class SpecError(HarnessError):
    """An experiment spec that cannot be run: `file: key.path: what was expected`."""

    def __init__(self, path: str, key: str, message: str) -> None:
        self.path, self.key = str(path), key
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {message}")


class PrepareError(HarnessError):
    """A step that prepares a server to test (a build, a venv, a model) failed: which step, and why."""

    def __init__(self, step: str, why: str, output: str = "", unobtainable: bool = False) -> None:
        self.step, self.why, self.output = step, why, output
        self.unobtainable = unobtainable  # no network, or no compiler and no root: nothing to fix in the code
        super().__init__(f"prepare step '{step}' failed: {why}")
