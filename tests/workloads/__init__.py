"""Tests of harness/workloads/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
