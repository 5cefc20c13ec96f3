"""The planner: a receding-horizon Pyomo model solved by HiGHS, and the Policy interface.

Pure: ``decide(state, forecasts, now)`` reads nothing but its arguments.
"""
