"""Tests of harness/realserver/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
