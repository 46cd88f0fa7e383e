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
    assert sorted(current.filter(owner=alice).values_list("share_bps", flat=True)) == [10000] * 14
    assert sorted(current.filter(owner=bob).values_list("share_bps", flat=True)) == (
        [5000] * 8 + [10000] * 2
    )
    assert AuditEntry.objects.filter(action="ownership.transfer").count() == 2
    assert MaintenanceWindow.objects.count() == 1
    assert Incident.objects.filter(ended_at__isnull=False).count() == 1

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
