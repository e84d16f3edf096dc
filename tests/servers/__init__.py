"""Tests of harness/servers/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
