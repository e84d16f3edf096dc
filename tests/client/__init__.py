"""Tests of harness/client/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
