"""What differs between the mindstudio-probe releases the runtime drives (8.x and 26.x).

Every release has the API verl's backend uses (the constructor with config_path, start(model),
stop(), service.reset_status()). The runtime also switches msprobe's collection off after a fault
(session._abort, a hook that raised): 26.x has `service._disable_dump_runtime()` for that, 8.x
has not, so there the same switches are turned off here. Imported only once msprobe is."""

from __future__ import annotations

import logging

log = logging.getLogger("verl_pdbg_conf.runtime")


def release() -> str:
    """The installed mindstudio-probe release, from its metadata ("unknown" without one)."""
    from importlib import metadata

    try:
        return metadata.version("mindstudio-probe")
    except metadata.PackageNotFoundError:
        return "unknown"


def note_missing(service) -> None:
    """Say once, when the debugger is created, what this release lacks and what is done instead."""
    if not callable(getattr(service, "_disable_dump_runtime", None)):
        log.warning("precision_debugger: msprobe %s has no service._disable_dump_runtime(); after a fault the "
                    "runtime turns msprobe's dump switches off itself (Runtime.is_running, "
                    "service.primitive_switch)", release())


def disable_dump(service) -> None:
    """Stop msprobe collecting without writing anything (stop() would write the dump)."""
    disable = getattr(service, "_disable_dump_runtime", None)
    if callable(disable):
        disable()
        return
    # msprobe 8.x: what 26.x's _disable_dump_runtime does, on the same attributes.
    from msprobe.core.common.runtime import Runtime

    Runtime.is_running = False
    service.primitive_switch = False
    switch = getattr(service, "_change_jit_switch", None)
    if callable(switch):
        switch(False)
