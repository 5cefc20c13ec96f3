"""Update the model: the decision's inputs laid out by job slot, into the persistent horizon model.

Pipeline stage 3 of a decision (after optimizer/inputs.py, before optimizer/solve_highs.py). The
planner keeps one HorizonModel: the job slot table (optimizer/slots.py), the matrix structure
(optimizer/formulation.py) and the HiGHS session (optimizer/solve_highs.py). Each decision the
jobs take their slots; while the structure still fits the slots, only its gang and deadline
coefficients are updated in place and the new costs and bounds (optimizer/parameters.py) go to the
live HiGHS model; otherwise the structure is built again and the old basis is carried over to it
(optimizer/basis_carry.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.basis_carry import carried_indices
from optimizer.config import PlannerConfig
from optimizer.deadlines import margin_steps
from optimizer.formulation import ModelStructure, build_structure, structure_key
from optimizer.inputs import PlanInputs
from optimizer.nodes import NodeHolds
from optimizer.parameters import Parameters, fill_parameters
from optimizer.slot_updates import EntryChanges, slots_match, update_slots
from optimizer.slots import SlotTable, into_slots
from optimizer.solve_highs import HighsSession, SolveOutcome


@dataclass(frozen=True)
class ModelUpdate:
    """One decision's model: its inputs by job slot, the structure, costs and bounds, and what the
    solver session needs to apply it (changed matrix entries, or the basis carried over)."""

    inputs: PlanInputs
    structure: ModelStructure
    params: Parameters
    coefficients: EntryChanges | None
    carry: tuple[np.ndarray, np.ndarray] | None


class HorizonModel:
    """The persistent horizon model: job slots, matrix structure and HiGHS session."""

    def __init__(self) -> None:
        self.slots = SlotTable()
        self.session = HighsSession()
        self._structure: ModelStructure | None = None
        self._structure_ids: tuple[str, ...] = ()  # job id of each slot in the last model

    def update(self, inputs: PlanInputs, config: PlannerConfig, holds: NodeHolds) -> ModelUpdate:
        """Lay ``inputs`` out by slot (with last decision's node ``holds``) and bring the model to them."""
        inputs = into_slots(inputs, self.slots, held_nodes=holds)
        key = structure_key(inputs)
        old = self._structure
        coefficients: EntryChanges | None = None
        carry: tuple[np.ndarray, np.ndarray] | None = None
        if old is not None and old.key == key and self.session.holds(key) and slots_match(old, inputs):
            structure = old
            coefficients = update_slots(structure, inputs)
        else:
            margin = margin_steps(config.deadline_margin_s, config.step_s)
            structure = build_structure(inputs, key, deadline_margin=margin)
            if old is not None:  # a new slot layout: start from the old basis, matched by job
                carry = carried_indices(old, self._structure_ids, structure, inputs.job_ids)
            self.session.forget(keep_basis=carry is not None)
        self._structure, self._structure_ids = structure, inputs.job_ids
        params = fill_parameters(structure, inputs, config)
        return ModelUpdate(inputs, structure, params, coefficients, carry)

    def solve(self, update: ModelUpdate, time_limit_s: float) -> SolveOutcome:
        return self.session.solve(
            update.structure, update.params, time_limit_s, update.coefficients, update.carry
        )


_OBJECTIVE_GROUPS = {
    "work_value": ("y0", "yb"),
    "shortfall": ("short", "move_short"),
    "min_replica_shortfall": ("minshort",),
    "preemption": ("pre",),
    "service_gpus_and_interference": ("R", "G"),
    "churn": ("up0", "up"),
    "deadline_shortfall": ("late",),
}


def objective_terms(update: ModelUpdate, x: np.ndarray) -> dict[str, float]:
    """The solved objective split by term (work value as a positive number)."""
    terms: dict[str, float] = {}
    for name, groups in _OBJECTIVE_GROUPS.items():
        idx = np.concatenate([update.structure.cols[g].ravel() for g in groups])
        terms[name] = float(update.params.cost[idx] @ x[idx])
    terms["work_value"] = -terms["work_value"]
    return terms
