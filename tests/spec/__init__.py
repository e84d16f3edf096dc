"""Tests of harness/spec/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
