"""The test session composes afresh: the on-disk composition cache (verl_facts/disk_cache.py) is
off unless a test turns it on with its own directory (tests/test_disk_cache.py)."""

import os

os.environ.setdefault("VERL_PDBG_CONF_CACHE", "off")
