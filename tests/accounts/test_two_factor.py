"""The operator console requires a second factor: TOTP, or a one-time recovery code."""

from __future__ import annotations

import re

import pytest
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import services
from accounts.models import AuditEntry
from tests.accounts.two_factor import console_login, current_code, give_authenticator
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_operator_logs_in_with_password_and_totp_code(client, oscar):
    console_login(client, oscar)
    assert client.get("/admin/").status_code == 200


def test_password_alone_is_not_enough(client, oscar):
    give_authenticator(oscar)
    response = client.post(
        "/admin/login/", {"username": oscar.email, "password": PASSWORD, "otp_token": ""}
    )
    assert response.status_code == 200
    assert "Enter the code from your authenticator app, or a recovery code." in response.text
    assert client.get("/admin/").status_code == 302


def test_a_wrong_code_is_refused(client, oscar):
    device = give_authenticator(oscar)
    wrong = f"{(int(current_code(device)) + 1) % 1_000_000:06d}"
    response = client.post(
        "/admin/login/", {"username": oscar.email, "password": PASSWORD, "otp_token": wrong}
    )
    assert "That authentication code is not valid (or was already used)." in response.text
    assert client.get("/admin/").status_code == 302


def test_a_session_without_the_second_factor_is_not_an_operator_session(client, oscar):
    give_authenticator(oscar)
    client.force_login(oscar)  # password only, as if through the owner portal
    response = client.get("/admin/fleet/gpu/")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/admin/login/")


def test_enrolment_then_recovery_codes_work_once(client, oscar):
    # First login: password only, no authenticator yet -> sent to enrol one.
    response = client.post("/admin/login/", {"username": oscar.email, "password": PASSWORD})
    assert response.headers["Location"] == "/admin/2fa/enrol/"
    page = client.get("/admin/2fa/enrol/")
    assert page.status_code == 200
    assert "<svg" in page.text and "otpauth://totp/" in page.text
    device = TOTPDevice.objects.get(user=oscar, confirmed=False)
    assert client.get("/admin/").status_code == 302  # not verified yet

    bad = client.post(
        "/admin/2fa/enrol/", {"token": "000000" if current_code(device) != "000000" else "111111"}
    )
    assert "That code does not match" in bad.text

    done = client.post("/admin/2fa/enrol/", {"token": current_code(device)})
    codes = re.findall(r"<li><code>([a-z2-7]{8})</code></li>", done.text)
    assert len(codes) == 10
    assert "no-store" in done.headers["Cache-Control"]
    assert client.get("/admin/").status_code == 200  # verified by the enrolment itself
    assert AuditEntry.objects.filter(action="2fa.enrol", actor=oscar).count() == 1

    other = client.__class__()
    login = {"username": oscar.email, "password": PASSWORD, "otp_token": codes[0]}
    assert other.post("/admin/login/", login).status_code == 302
    assert StaticToken.objects.filter(device__user=oscar).count() == 9
    again = client.__class__().post("/admin/login/", login)
    assert "not valid (or was already used)" in again.text


def test_enrolment_is_only_for_operators_without_an_authenticator(client, alice, oscar):
    client.force_login(alice)
    assert client.get("/admin/2fa/enrol/").status_code == 403
    give_authenticator(oscar)
    client.force_login(oscar)
    assert client.get("/admin/2fa/enrol/").status_code == 403


def test_owner_cannot_log_in_to_the_console(client, alice):
    response = client.post(
        "/admin/login/", {"username": alice.email, "password": PASSWORD, "otp_token": ""}
    )
    assert response.status_code == 200
    assert "staff account" in response.text


def test_recovery_codes_can_be_renewed_by_a_verified_operator(client, oscar):
    console_login(client, oscar)
    assert client.get("/admin/2fa/recovery-codes/").status_code == 200
    response = client.post("/admin/2fa/recovery-codes/")
    assert len(re.findall(r"<li><code>", response.text)) == 10
    assert StaticToken.objects.filter(device__user=oscar).count() == 10


def test_an_owners_enrolment_is_audited_as_the_users_own_act(alice):
    device = services.totp_enrolment_start(user=alice)
    services.totp_enrolment_confirm(device=device, token=current_code(device))
    entry = AuditEntry.objects.get(action="2fa.enrol", actor=alice)
    assert entry.reason == "The user enrolled an authenticator app."
