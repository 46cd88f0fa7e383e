from tests.telemetry.conftest import _windows_emptied

__all__ = ["_windows_emptied"]
