"""The loop's ports and its step: the bottom layer above schemas/.

Everything that takes part in the control loop implements a port defined here (the simulator, the
stream services, the actuators, the planner and the baselines) and imports down to it; this
package imports only schemas/.
"""

from loop.control import ControlLoop, NullSink, StepRecord
from loop.decision import Decision, config_fingerprint, inputs_digest, plan_id_for
from loop.ports import Actuator, Clock, DecisionSink, ForecastSource, Policy, StateSource
from loop.sources import ClusterSource, SourcedJob, SourceSnapshot, latest_kinds, lifecycle_events

__all__ = [
    "Actuator",
    "Clock",
    "ClusterSource",
    "ControlLoop",
    "Decision",
    "DecisionSink",
    "ForecastSource",
    "NullSink",
    "Policy",
    "SourceSnapshot",
    "SourcedJob",
    "StateSource",
    "StepRecord",
    "config_fingerprint",
    "inputs_digest",
    "latest_kinds",
    "lifecycle_events",
    "plan_id_for",
]
