"""Per-request context the domain layer may read without importing the project package.

``request_id_var`` carries the id of the request being served (``-`` outside requests), set
by the project's request-id middleware; log lines and audit entries written deep in a service
both name the request that caused them.
"""

from __future__ import annotations

from contextvars import ContextVar

request_id_var: ContextVar[str] = ContextVar("steward_audit_request_id", default="-")
