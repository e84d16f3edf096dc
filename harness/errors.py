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
