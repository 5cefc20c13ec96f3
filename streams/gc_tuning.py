"""Process tuning shared by the stream services and the benchmarks that stand for them: the
cycle collector's thresholds for batches of short-lived events, and freezing what is alive once a
process is warm. Called by :class:`streams.services.runtime.ServiceRuntime` and ``bench/``.
"""

from __future__ import annotations

import gc

GC_GEN0_THRESHOLD = 20_000
"""Cycle-collector thresholds of a stream service process (raised, never lowered).

A consumed batch is tens of thousands of short-lived events, freed by reference counting (they
hold no cycles). With CPython's default gen-0 threshold (700) the collector ran ~30 times per
batch and promoted live batches into full collections: about a fifth of the telemetry ingest time
on the bench. At 20,000 (gen 1 every 50, gen 2 every 100 of those) it runs about once a batch."""


def tune_gc_for_batches() -> None:
    gen0, gen1, gen2 = gc.get_threshold()
    if gen0 == 0:  # the collector is off: leave it so
        return
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), max(gen1, 50), max(gen2, 100))


def freeze_warm_objects() -> None:
    """Once a service is warm (modules, fitted models, the solver's model, the first state all
    built), move every object alive into the collector's permanent generation: a full collection
    then scans only what the loop allocated since. Without it one full collection in ~200 planner
    decisions cost 8-16 ms (``ebbtide bench-decisions`` seed case)."""
    gc.freeze()
