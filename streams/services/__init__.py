"""The stream services of the loop: collector, state, forecaster, optimizer, actuator.

Each is a thin adapter over pure parts, run by streams.services.runtime.
"""
