"""The audit helper: bulk, one instant, the request id of the request being served."""

from __future__ import annotations

import pytest

from accounts.context import request_id_var
from accounts.models import AuditEntry
from accounts.services import AuditEvent, audit_log

pytestmark = pytest.mark.django_db


def test_audit_log_writes_all_events_in_one_insert(
    alice_owner, bob_owner, oscar, django_assert_num_queries
):
    events = [
        AuditEvent.of(owner, action="owner.note", before={"n": 1}, after={"n": 2})
        for owner in (alice_owner, bob_owner)
    ]
    with django_assert_num_queries(1):
        entries = audit_log(actor=oscar, events=events, reason="why")
    assert len({e.at for e in entries}) == 1
    assert list(
        AuditEntry.objects.order_by("object_repr").values_list(
            "object_repr", "reason", "request_id"
        )
    ) == [
        ("Alice Compute Ltd", "why", ""),
        ("Bob Chen", "why", ""),
    ]


def test_request_id_comes_from_the_context(alice_owner):
    token = request_id_var.set("abc-1")
    try:
        (entry,) = audit_log(actor=None, events=[AuditEvent.of(alice_owner, action="x")])
    finally:
        request_id_var.reset(token)
    assert entry.request_id == "abc-1"
    assert audit_log(actor=None, events=[]) == []
