"""Demand forecasting: pure functions from a service's demand history to a DemandForecast."""
