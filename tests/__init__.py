"""The test suite; `tests.helpers` holds what tests share (processes, hand-built captures), none a test."""
