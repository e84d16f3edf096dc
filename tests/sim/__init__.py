"""Tests of harness/sim/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
