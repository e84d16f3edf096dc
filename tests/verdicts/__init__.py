"""Tests of harness/verdicts/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
