"""Tests of harness/commands/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
