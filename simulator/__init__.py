"""A discrete-time GPU cluster simulator, scenarios as data files, and the baseline policies."""
