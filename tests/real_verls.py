"""The verl releases the tests fetch from the registry (tests/conftest.py's verl_wheels)."""

# Releases before the precision_debugger backend (every layout from 0.1 to 0.7), and one with it.
OLD_VERLS = ("0.1", "0.2.0.post2", "0.3.0.post1", "0.4.1", "0.5.0", "0.6.1", "0.7.1")
VERL_WHEELS = OLD_VERLS + ("0.9.1",)
