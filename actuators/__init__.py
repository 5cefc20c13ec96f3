"""Actuators: apply step 0 of an Allocation through Kubernetes, Slurm or a dry run, idempotently."""
