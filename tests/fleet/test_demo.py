"""The demo fleet: seeded once, consistent, and oscar can log in with the demo code."""

from __future__ import annotations

import pytest
from django.utils import timezone

from accounts.models import AuditEntry, Owner
from fleet.models import Cluster, Gpu, Incident, MaintenanceWindow, Node, Ownership
from portal.demo import DEMO_TOTP_SECRET, demo_otpauth_uri, demo_totp_code, seed_demo

pytestmark = pytest.mark.django_db


def test_demo_fleet_is_seeded_once_with_whole_and_fractional_owners(client):
    first = seed_demo(password="demo-password-123")
    second = seed_demo(password="demo-password-123")
    assert first["gpus"] == second["gpus"] == 64
    assert (Cluster.objects.count(), Node.objects.count(), Gpu.objects.count()) == (2, 8, 64)
    assert set(Gpu.objects.values_list("lifecycle_state", flat=True)) == {"in_service"}
    now = timezone.now()
    current = Ownership.objects.filter(valid_from__lte=now, valid_to__isnull=True)
    alice, bob = (
        Owner.objects.get(legal_name="Alice Compute Ltd"),
        Owner.objects.get(legal_name="Bob Chen"),
    )
    assert sorted(current.filter(owner=alice).values_list("share_bps", flat=True)) == [10000] * 12
    assert sorted(current.filter(owner=bob).values_list("share_bps", flat=True)) == (
        [5000] * 8 + [10000] * 4
    )
    # Two sales from Alice to Bob of two GPUs each; the second inside last month, at a second.
    assert AuditEntry.objects.filter(action="ownership.transfer").count() == 4
    assert MaintenanceWindow.objects.count() == 2
    assert Incident.objects.filter(ended_at__isnull=False).count() == 2

    response = client.post(
        "/admin/login/",
        {
            "username": "oscar@steward.example",
            "password": "demo-password-123",
            "otp_token": demo_totp_code(),
        },
    )
    assert response.status_code == 302
    assert client.get("/admin/fleet/gpu/").status_code == 200
    assert f"secret={DEMO_TOTP_SECRET}" in demo_otpauth_uri()


def test_the_demo_has_two_operators_who_can_close_and_publish(client):
    """Publishing takes one operator to request and another to approve: the demo's second
    operator, olga, is a billing officer (not a superuser) with the same demo authenticator."""
    from accounts.models import User

    seed_demo(password="demo-password-123")
    oscar = User.objects.get(email="oscar@steward.example")
    olga = User.objects.get(email="olga@steward.example")
    for operator in (oscar, olga):
        assert operator.is_staff
        assert operator.has_perms(["billing.close_period", "billing.publish_statement"])
    assert not olga.is_superuser
    assert not olga.has_perm("fleet.transfer_ownership")
    response = client.post(
        "/admin/login/",
        {
            "username": "olga@steward.example",
            "password": "demo-password-123",
            "otp_token": demo_totp_code(),
        },
    )
    assert response.status_code == 302
    assert client.get("/admin/billing/statement/").status_code == 200
    assert client.get("/admin/billing/period/").status_code == 200
