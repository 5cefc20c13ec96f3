"""Reading GPUs through NVML (``import pynvml`` from nvidia-ml-py): one GpuSample per GPU.

The collector's real source. :func:`open_nvml` initialises NVML and raises :class:`NvmlUnavailable`
with a plain message when there is no driver or GPU (``NVMLError_LibraryNotFound`` on a machine
without one), so the collector exits with that message instead of a traceback. Each reading
gives utilization, memory, power, clocks and the processes sharing the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from schemas import GpuSample

MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine; the message says why and what to do."""


def open_nvml() -> Any:
    """Initialise NVML and return the ``pynvml`` module, or raise NvmlUnavailable."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc}); pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise NvmlUnavailable(
            "no NVIDIA driver here (NVML library not found): this machine has no GPU to collect from. "
            "Run the collector on a GPU node, or use the simulated source "
            "(EBBTIDE_COLLECTOR__SOURCE=simulator)."
        ) from None
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not start: {exc}") from None
    return pynvml


def _safe(call: Callable[[], Any], default: Any) -> Any:
    try:
        return call()
    except Exception:  # an unsupported query on this GPU model: report the default, keep the rest
        return default


@dataclass
class NvmlReader:
    """Reads every GPU of this node. ``pynvml`` is the initialised module from :func:`open_nvml`."""

    pynvml: Any
    cluster: str
    pool: str
    node: str

    def gpu_count(self) -> int:
        return int(self.pynvml.nvmlDeviceGetCount())

    def read(self, now: datetime | None = None) -> list[GpuSample]:
        nv = self.pynvml
        when = now or datetime.now(UTC)
        samples = []
        for index in range(self.gpu_count()):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = nv.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            util = _safe(partial(lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu, handle), 0)
            memory = nv.nvmlDeviceGetMemoryInfo(handle)
            power_mw = _safe(partial(nv.nvmlDeviceGetPowerUsage, handle), 0)
            sm_mhz = _safe(partial(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM), 0)
            mem_mhz = _safe(partial(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM), 0)
            compute = _safe(partial(nv.nvmlDeviceGetComputeRunningProcesses, handle), [])
            graphics = _safe(partial(nv.nvmlDeviceGetGraphicsRunningProcesses, handle), [])
            pids = {p.pid for p in [*compute, *graphics]}
            samples.append(
                GpuSample(
                    cluster=self.cluster,
                    pool=self.pool,
                    node=self.node,
                    gpu_index=index,
                    gpu_uuid=uuid,
                    time=when,
                    utilization_pct=float(min(max(util, 0), 100)),
                    memory_used_mib=float(memory.used) / MIB,
                    memory_total_mib=float(memory.total) / MIB,
                    power_w=float(power_mw) / 1000.0,
                    sm_clock_mhz=float(sm_mhz),
                    mem_clock_mhz=float(mem_mhz),
                    processes=len(pids),
                )
            )
        return samples

    def close(self) -> None:
        _safe(self.pynvml.nvmlShutdown, None)
