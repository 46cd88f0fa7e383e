"""The verifier's tests use billing's actors (olga, the disclosure) and its windows cleanup."""

from tests.billing.conftest import _windows_emptied, disclosure, olga

__all__ = ["_windows_emptied", "disclosure", "olga"]
