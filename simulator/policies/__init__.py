"""Baseline policies (fifo, priority-backfill, reactive), each behind optimizer.policy.Policy."""
