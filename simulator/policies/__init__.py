"""Baseline policies (fifo, priority-backfill, reactive), each behind loop.Policy."""
