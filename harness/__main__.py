"""`python -m harness`: the same entry point as the `harness` command, for a checkout with no script."""

from harness.cli import entry

entry()
