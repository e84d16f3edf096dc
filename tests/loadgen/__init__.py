"""Tests of harness/loadgen/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
