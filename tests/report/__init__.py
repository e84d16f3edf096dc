"""Tests of harness/report/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
