"""How NVML error codes map to what the agent does about them.

Mapping by numeric code (``NVMLError.value``) rather than by subclass works the same with the
real ``pynvml`` and with the fake, whose errors are the real ``pynvml`` classes anyway.
"""

from __future__ import annotations

import enum
from typing import Any

# Numeric codes from nvml.h; they are ABI and never change between driver versions.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6  # nvmlDeviceGetSamples: nothing newer than the timestamp asked for
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25
UNINITIALIZED = 1
INVALID_ARGUMENT = 2


class ErrorAction(enum.Enum):
    UNSUPPORTED = "unsupported"  # remember per GPU and metric; report null; never ask again
    GPU_LOST = "gpu_is_lost"  # GPU down until a call succeeds again
    RESET_REQUIRED = "reset_required"  # GPU down until reset
    REINIT = "reinit"  # NVML lost its state (driver reload): re-init and re-enumerate
    UNAVAILABLE = "nvml_unavailable"  # no library / no driver: node-wide, retry with backoff
    TRANSIENT = "transient"  # anything else: null for this sample only


_ACTIONS = {
    NOT_SUPPORTED: ErrorAction.UNSUPPORTED,
    FUNCTION_NOT_FOUND: ErrorAction.UNSUPPORTED,
    # Without root some queries always fail; asking again every 5 s would only spam.
    NO_PERMISSION: ErrorAction.UNSUPPORTED,
    GPU_IS_LOST: ErrorAction.GPU_LOST,
    RESET_REQUIRED: ErrorAction.RESET_REQUIRED,
    UNINITIALIZED: ErrorAction.REINIT,
    LIBRARY_NOT_FOUND: ErrorAction.UNAVAILABLE,
    DRIVER_NOT_LOADED: ErrorAction.UNAVAILABLE,
    LIB_RM_VERSION_MISMATCH: ErrorAction.UNAVAILABLE,
}


def error_code(exc: BaseException) -> int | None:
    value: Any = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def error_action(exc: BaseException) -> ErrorAction:
    code = error_code(exc)
    if code is None:
        return ErrorAction.TRANSIENT
    return _ACTIONS.get(code, ErrorAction.TRANSIENT)


def error_name(exc: BaseException) -> str:
    """A stable short name such as ``NVMLError_GpuIsLost`` for logs and event details."""
    return type(exc).__name__
