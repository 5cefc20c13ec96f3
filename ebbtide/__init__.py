"""ebbtide's composition root: settings, the command line, and the wiring of the parts."""

__version__ = "0.1.0"
