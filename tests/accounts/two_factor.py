"""Logging operators in the real way: password plus a TOTP code computed from their key."""

from __future__ import annotations

from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import services
from accounts.models import User
from tests.conftest import PASSWORD

TEST_KEY_HEX = "3132333435363738393031323334353637383930"  # RFC 6238's test key


def current_code(device: TOTPDevice) -> str:
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{value:0{device.digits}d}"


def give_authenticator(user: User) -> TOTPDevice:
    return services.totp_device_provision(user=user, key_hex=TEST_KEY_HEX, by=None)


def console_login(client: Client, user: User, device: TOTPDevice | None = None) -> Client:
    """Logs ``user`` in to the operator console with password and a fresh TOTP code."""
    device = device or give_authenticator(user)
    response = client.post(
        "/admin/login/?next=/admin/",
        {"username": user.email, "password": PASSWORD, "otp_token": current_code(device)},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert response.headers["Location"] == "/admin/"
    return client
