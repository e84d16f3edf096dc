"""Tests of harness/summary/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
