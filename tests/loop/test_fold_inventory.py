"""The state fold and service take a cluster source's PoolInventory (pure, no broker)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from loop_factories import STEP_S, at, cluster
from tests_clock import ManualClock

from optimizer.inputs import nodes_going_out
from schemas import InventoryNode, InventoryPool, PoolInventory, PoolWindow
from schemas.topics import INVENTORY
from streams.fold import ClusterFold
from streams.services.state import StateProcessor, restore_fold


def inventory(
    step: int, *nodes: InventoryNode, pool: str = "a100", cluster_name: str = "c1"
) -> PoolInventory:
    return PoolInventory(
        cluster=cluster_name,
        time=at(step),
        source="slurm",
        pools=[InventoryPool(name=pool, gpu_type="A100", nodes=list(nodes))],
    )


def node(name: str, gpus: int, free: int, reason: str | None = None) -> InventoryNode:
    return InventoryNode(name=name, gpus=gpus, gpus_free=free, schedulable=reason is None, reason=reason)


def a100(fold: ClusterFold, step: int = 1):  # type: ignore[no-untyped-def]
    return next(p for p in fold.snapshot(at(step)).pools if p.name == "a100")


def test_schedulable_nodes_set_the_pools_gpus_and_free_gpus_by_node() -> None:
    fold = ClusterFold(seed=cluster(0))
    assert fold.apply(inventory(1, node("x2", 8, 3), node("x1", 8, 8), node("x3", 8, 8, reason="drained")))
    pool = a100(fold)
    assert pool.gpus_available == 16, "the drained node counts none"
    assert (pool.node_names, pool.free_gpus_by_node) == (["x1", "x2"], [8, 3])
    t4 = next(p for p in fold.snapshot(at(1)).pools if p.name == "t4")
    assert t4 == cluster(0).pools[1], "a pool no source reported keeps its seed"


def test_available_is_capped_by_the_pools_configured_total() -> None:
    fold = ClusterFold(seed=cluster(0))  # a100: 16 GPUs configured
    fold.apply(inventory(1, node("x1", 8, 8), node("x2", 8, 8), node("x3", 8, 8)))
    assert a100(fold).gpus_available == 16


def test_an_older_or_replayed_inventory_changes_nothing() -> None:
    fold = ClusterFold(seed=cluster(0))
    assert fold.apply(inventory(2, node("x1", 8, 8, reason="down")))
    assert not fold.apply(inventory(1, node("x1", 8, 8)))  # older
    assert not fold.apply(inventory(2, node("x1", 8, 8)))  # same time again
    assert a100(fold, 2).gpus_available == 0
    assert fold.counters.ignored == 2


def test_an_unknown_pool_is_named_for_the_dead_letter() -> None:
    fold = ClusterFold(seed=cluster(0))
    reason = fold.unknown_reference(inventory(1, node("x1", 8, 8), pool="h100"))
    assert reason is not None and "h100" in reason and "slurm" in reason
    assert fold.unknown_reference(inventory(1, node("x1", 8, 8))) is None
    assert fold.unknown_reference(inventory(1, node("x1", 8, 8), pool="h100", cluster_name="other")) is None


def _processor(step: int = 1) -> StateProcessor:
    return StateProcessor(fold=ClusterFold(seed=cluster(0)), clock=ManualClock(at(step)))


def test_state_service_dead_letters_unknown_pools_and_far_future_inventories() -> None:
    state = _processor()
    with pytest.raises(ValueError, match="h100"):
        state.on_event(INVENTORY, inventory(1, node("x1", 8, 8), pool="h100"))
    future = inventory(1, node("x1", 8, 8)).model_copy(update={"time": at(1) + timedelta(days=30)})
    with pytest.raises(ValueError, match="max_event_skew_s"):
        state.on_event(INVENTORY, future)
    assert state.fold.inventory == {}


def test_a_node_lost_in_the_inventory_republishes_at_once() -> None:
    state = _processor()
    state.on_event(INVENTORY, inventory(1, node("x1", 8, 8), node("x2", 8, 8)))
    state.on_idle()  # first snapshot
    state.on_event(INVENTORY, inventory(1, node("x1", 8, 8), node("x2", 8, 8, reason="down")).model_copy(
        update={"time": at(1) + timedelta(seconds=5)}))  # fmt: skip
    (out,) = state.on_idle()
    assert out[1].pools[0].gpus_available == 8  # type: ignore[attr-defined]
    assert state.triggers[-1].startswith("capacity lost: a100 -8")


def test_restore_keeps_the_inventory_read_back_from_its_topic() -> None:
    fold, _ = restore_fold(cluster(0), [], 96, inventories=[inventory(1, node("x1", 8, 4, reason="down"))])
    assert a100(fold).gpus_available == 0


def test_announced_maintenance_reaches_the_pool_and_the_planners_node_book() -> None:
    fold = ClusterFold(seed=cluster(0))
    soon = PoolWindow(start=at(9), end=at(17), gpus_out=8, nodes=["x2"], reason="maintenance (fw)")
    over = PoolWindow(start=at(-9), end=at(0), gpus_out=8, nodes=["x1"])
    report = inventory(1, node("x1", 8, 8), node("x2", 8, 8))
    report.pools[0].windows.extend([soon, over])
    fold.apply(report)
    pool = a100(fold)
    assert pool.windows == [soon], "the window that has ended is left out"
    assert nodes_going_out(pool, at(1)) == {1: 8 * STEP_S}, "node x2 (index 1) goes out in 8 steps"


def test_a_window_naming_a_node_the_pool_lacks_is_rejected() -> None:
    window = PoolWindow(start=at(9), end=at(17), gpus_out=8, nodes=["x9"])
    with pytest.raises(ValueError, match=r"windows\[0\].nodes: \['x9'\] are not nodes of pool 'a100'"):
        InventoryPool(name="a100", gpu_type="A100", nodes=[node("x1", 8, 8)], windows=[window])
