"""Tests of harness/sweep/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
