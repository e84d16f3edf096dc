"""Tests of harness/whatif/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
