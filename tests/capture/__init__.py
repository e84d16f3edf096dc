"""Tests of harness/capture/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
