"""Benchmarks: they print tables and write JSON; speed and memory targets live here, not in tests."""
