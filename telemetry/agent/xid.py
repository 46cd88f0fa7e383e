"""The one XID classification table of the agent (documented in docs/agent.md).

Severity says what an XID means for the GPU's availability, not for the job that hit it:

* ``app``      - the application (or its context) failed; the GPU itself is fine.
* ``degraded`` - the GPU still works but its health is reduced (ECC, row remap, firmware
                 warnings); a drain or reset is due soon.  The window it lands in is degraded.
* ``down``     - the GPU cannot run work until it is reset or the node rebooted.  The window it
                 lands in is down; later windows are judged by NVML (lost, reset required).
* ``info``     - informational; no state change.

Sources: NVIDIA "Xid Errors" and the Xid catalog for Ampere and newer (resolution buckets
RESTART_APP / RESET_GPU / RESTART_BM / CONTACT_SUPPORT).  XIDs not listed are ``unknown``: they
are shipped as events but change no state, so a new driver's XID never marks a GPU down by guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

XidSeverity = Literal["app", "degraded", "down", "info", "unknown"]


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    name: str
    severity: XidSeverity


_TABLE: dict[int, tuple[str, XidSeverity]] = {
    8: ("GPU stopped processing (channel idle timeout)", "app"),
    11: ("Invalid or corrupted push buffer stream", "app"),
    13: ("Graphics engine exception", "app"),
    31: ("GPU memory page fault", "app"),
    32: ("Invalid or corrupted push buffer stream", "app"),
    38: ("Driver firmware error", "degraded"),
    43: ("GPU stopped processing (reset channel)", "app"),
    44: ("Graphics engine fault during context switch", "degraded"),
    45: ("Preemptive cleanup, due to previous errors", "app"),
    48: ("Double bit ECC error", "degraded"),
    61: ("Internal micro-controller breakpoint/warning", "degraded"),
    62: ("Internal micro-controller halt", "down"),
    63: ("ECC page retirement or row remapping recording event", "degraded"),
    64: ("ECC page retirement or row remapper recording failure", "degraded"),
    68: ("Video processor exception", "app"),
    69: ("Graphics engine class error", "app"),
    74: ("NVLink error", "down"),
    79: ("GPU has fallen off the bus", "down"),
    92: ("High single-bit ECC error rate", "degraded"),
    94: ("Contained ECC error", "degraded"),
    95: ("Uncontained ECC error", "down"),
    109: ("Context switch timeout", "app"),
    119: ("GSP RPC timeout", "down"),
    120: ("GSP error", "down"),
    121: ("C2C link corrected error", "degraded"),
    122: ("SPI PMU RPC read failure", "degraded"),
    123: ("SPI PMU RPC write failure", "degraded"),
    140: ("Unrecovered ECC error", "down"),
    143: ("GPU initialization failure", "down"),
    154: ("GPU recovery action changed", "info"),
}

SEVERITY_ORDER: dict[XidSeverity, int] = {
    "info": 0,
    "unknown": 0,
    "app": 1,
    "degraded": 2,
    "down": 3,
}


def classify_xid(code: int) -> XidInfo:
    """Severity and name of an XID; unknown codes get severity ``unknown``."""
    entry = _TABLE.get(code)
    if entry is None:
        return XidInfo(code=code, name="Unknown XID", severity="unknown")
    return XidInfo(code=code, name=entry[0], severity=entry[1])


def xid_table() -> list[XidInfo]:
    """Every classified XID, in code order (for docs and tests)."""
    return [classify_xid(code) for code in sorted(_TABLE)]
