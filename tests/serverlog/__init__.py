"""Tests of harness/serverlog/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
