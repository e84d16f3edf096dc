"""Tests of harness/summarize/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
