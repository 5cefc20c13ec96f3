"""Slurm backend of the actuators: partitions as pools, jobs held/released/requeued, reservations.

Transport: slurmrestd when a URL and token are configured (``SlurmRest``), else the CLI
(``SlurmCli``). Both return Slurm's own JSON records, so the backend parses one format.
"""

from actuators.slurm.backend import SlurmBackend, SlurmTransport, reservation_name
from actuators.slurm.cli import SlurmCli

__all__ = ["SlurmBackend", "SlurmCli", "SlurmTransport", "reservation_name"]
