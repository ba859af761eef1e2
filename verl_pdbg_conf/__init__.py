"""Pre-flight validation, Hydra config groups and a runtime profiler for msprobe's
PrecisionDebugger in verl. Importing this package stays cheap: no torch, msprobe,
verl or hydra at import time."""

__version__ = "0.1.0"
