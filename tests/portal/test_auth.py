"""Logging in: throttling, the second factor, password reset by email, sessions."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.sessions.models import Session
from django.core import mail
from django.test import Client
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.models import AuditEntry
from portal.models import UserSession
from portal.tasks import password_reset_send
from tests.accounts.two_factor import current_code, give_authenticator
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LOCKED = "Too many failed attempts for this account. Logging in is paused for 15 minutes"


def log_in(client: Client, email: str, password: str = PASSWORD, **extra):
    return client.post("/login/", {"username": email, "password": password}, **extra)


def test_login_records_the_session_and_goes_to_next(client, alice, now):
    response = client.post(
        "/login/?next=/gpus/",
        {"username": "ALICE@owner.example", "password": PASSWORD, "next": "/gpus/"},
        HTTP_USER_AGENT="Mozilla/5.0 Test",
        REMOTE_ADDR="198.51.100.7",
    )
    assert response.status_code == 302 and response.headers["Location"] == "/gpus/"
    session = UserSession.objects.get(user=alice)
    assert (session.ip, session.user_agent) == ("198.51.100.7", "Mozilla/5.0 Test")
    assert session.session_key == client.session.session_key


def test_next_may_not_leave_the_site(client, alice):
    response = client.post(
        "/login/", {"username": alice.email, "password": PASSWORD, "next": "https://evil.example/"}
    )
    assert response.headers["Location"] == "/"


def test_five_failures_lock_the_account_for_the_window(client, alice, now):
    for attempt in range(4):
        response = log_in(client, alice.email, "wrong")
        assert response.status_code == 200, attempt
        assert "Please enter a correct email address and password" in response.content.decode()
    response = log_in(client, alice.email, "wrong")
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "900"
    assert LOCKED in response.content.decode()
    # Even the right password is refused while locked, and from another address too.
    response = log_in(client, alice.email, REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 429
    now.shift(dt.timedelta(minutes=14))
    response = log_in(client, alice.email)
    assert response.status_code == 429
    assert "paused for 1 minute;" in response.content.decode()
    now.shift(dt.timedelta(minutes=1))
    assert log_in(client, alice.email).status_code == 302


def test_a_success_clears_the_account_count(client, alice, now):
    for _ in range(4):
        log_in(client, alice.email, "wrong")
    assert log_in(client, alice.email).status_code == 302
    client.logout()
    for _ in range(4):
        assert log_in(client, alice.email, "wrong").status_code == 200


def test_unknown_accounts_are_throttled_the_same_way(client, now):
    for _ in range(4):
        assert log_in(client, "nobody@example.com", "x").status_code == 200
    assert log_in(client, "nobody@example.com", "x").status_code == 429


def test_twenty_failures_from_one_address_lock_the_address(client, alice, now):
    for n in range(19):
        assert log_in(client, f"guess{n}@example.com", "x").status_code == 200
    response = log_in(client, "guess19@example.com", "x")
    assert response.status_code == 429
    assert "Too many failed attempts for your network address" in response.content.decode()
    assert log_in(client, alice.email).status_code == 429
    assert log_in(client, alice.email, REMOTE_ADDR="192.0.2.50").status_code == 302


def test_login_asks_for_the_code_when_the_user_has_an_authenticator(client, alice, now):
    device = give_authenticator(alice)
    response = log_in(client, alice.email)
    assert response.headers["Location"] == "/login/verify/"
    assert client.get("/").status_code == 302  # not logged in before the code
    bad = client.post("/login/verify/", {"code": "000000"})
    assert "That code is not valid" in bad.content.decode()
    now.shift(dt.timedelta(seconds=2))  # django-otp makes a device wait after a wrong code
    good = client.post("/login/verify/", {"code": current_code(device)})
    assert good.status_code == 302 and good.headers["Location"] == "/"
    assert client.get("/").status_code == 200
    assert UserSession.objects.filter(user=alice).count() == 1


def test_a_recovery_code_works_once(client, alice, now):
    give_authenticator(alice)
    from accounts.services import recovery_codes_regenerate

    codes = recovery_codes_regenerate(user=alice)
    log_in(client, alice.email)
    assert client.post("/login/verify/", {"code": codes[0]}).status_code == 302
    other = Client()
    log_in(other, alice.email)
    assert (
        "That code is not valid"
        in other.post("/login/verify/", {"code": codes[0]}).content.decode()
    )


def test_wrong_codes_count_towards_the_lock(client, alice, now):
    give_authenticator(alice)
    log_in(client, alice.email)
    for _ in range(4):
        assert client.post("/login/verify/", {"code": "000000"}).status_code == 200
    assert client.post("/login/verify/", {"code": "000000"}).status_code == 429
    # The pending login is dropped: a code alone cannot be tried again.
    assert client.post("/login/verify/", {"code": "000000"}).status_code == 302


def test_the_second_step_expires(client, alice, now):
    device = give_authenticator(alice)
    log_in(client, alice.email)
    now.shift(dt.timedelta(minutes=6))
    response = client.post("/login/verify/", {"code": current_code(device)})
    assert response.headers["Location"] == "/login/"


def test_enrol_confirm_show_codes_then_disable(client, alice, now):
    client.force_login(alice)
    page = client.get("/settings/security/").content.decode()
    assert "Set up two-factor authentication" in page
    enrol = client.get("/settings/security/2fa/enrol/").content.decode()
    assert "<svg" in enrol and "otpauth" not in enrol.split("<svg")[0][-10:]
    device = TOTPDevice.objects.get(user=alice, confirmed=False)
    wrong = client.post("/settings/security/2fa/enrol/", {"code": "123456"})
    assert "That code does not match" in wrong.content.decode()
    done = client.post("/settings/security/2fa/enrol/", {"code": current_code(device)})
    codes = re.findall(r"<li><code>([a-z0-9]+)</code></li>", done.content.decode())
    assert len(codes) == 10
    assert "no-store" in done.headers["Cache-Control"]
    assert client.get("/settings/security/").status_code == 200  # this session is verified
    assert "badge-on" in client.get("/settings/security/").content.decode()

    refused = client.post("/settings/security/2fa/disable/", {"code": "000000"}, follow=True)
    assert "two-factor authentication stays on" in refused.content.decode()
    assert TOTPDevice.objects.filter(user=alice, confirmed=True).exists()
    device.refresh_from_db()
    now.shift(dt.timedelta(seconds=30))
    client.post("/settings/security/2fa/disable/", {"code": current_code(device)})
    assert not TOTPDevice.objects.filter(user=alice).exists()
    assert not StaticDevice.objects.filter(user=alice).exists()
    assert AuditEntry.objects.filter(action="2fa.disable", object_id=str(alice.pk)).count() == 1


def test_sessions_without_the_second_factor_are_logged_out_after_enrolment(alice, now):
    elsewhere = Client()
    elsewhere.force_login(alice)
    give_authenticator(alice)
    response = elsewhere.get("/")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login/")


def test_new_recovery_codes_replace_the_old(client, alice, now):
    device = give_authenticator(alice)
    from accounts.services import recovery_codes_regenerate

    old = recovery_codes_regenerate(user=alice)
    log_in(client, alice.email)
    client.post("/login/verify/", {"code": current_code(device)})
    response = client.post("/settings/security/2fa/recovery-codes/")
    new = re.findall(r"<li><code>([a-z0-9]+)</code></li>", response.content.decode())
    assert len(new) == 10 and not set(new) & set(old)
    assert not StaticDevice.objects.get(user=alice).token_set.filter(token=old[0]).exists()


def test_password_reset_is_queued_on_commit_and_the_link_works(
    client, alice, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/password-reset/", {"email": "alice@owner.example"})
    assert response.headers["Location"] == "/password-reset/sent/"
    assert len(callbacks) == 1 and mail.outbox == []
    # What the worker runs for that callback:
    password_reset_send.apply(
        kwargs={"user_id": alice.pk, "domain": "testserver", "use_https": False}
    ).get()
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["alice@owner.example"]
    assert message.subject == "[Steward] Reset your Steward password"
    found = re.search(r"http://testserver(/password-reset/\S+/)", str(message.body))
    assert found is not None
    link = found.group(1)
    form = client.get(link, follow=True)
    assert "Choose a new password" in form.content.decode()
    new = "a-much-longer-new-passphrase"
    done = client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})
    assert done.headers["Location"] == "/password-reset/done/"
    assert log_in(Client(), alice.email, new).status_code == 302


def test_password_reset_for_an_unknown_email_sends_nothing(
    client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/password-reset/", {"email": "nobody@example.com"})
    assert response.headers["Location"] == "/password-reset/sent/"
    assert callbacks == []


def test_sessions_are_listed_and_revoked_at_once(alice, now):
    laptop, phone = Client(), Client()
    log_in(laptop, alice.email, HTTP_USER_AGENT="Laptop browser", REMOTE_ADDR="198.51.100.1")
    log_in(phone, alice.email, HTTP_USER_AGENT="Phone browser", REMOTE_ADDR="198.51.100.2")
    page = laptop.get("/settings/security/").content.decode()
    assert "Laptop browser" in page and "Phone browser" in page
    assert page.count("This session") == 1
    assert re.search(r"This session</span></th>\s*<td>198\.51\.100\.1</td>", page)
    phone_session = UserSession.objects.get(user_agent="Phone browser")
    response = laptop.post(f"/settings/security/sessions/{phone_session.pk}/revoke/")
    assert response.headers["Location"] == "/settings/security/"
    assert not Session.objects.filter(session_key=phone_session.session_key).exists()
    assert phone.get("/").status_code == 302
    assert AuditEntry.objects.filter(action="session.revoke").count() == 1


def test_end_all_other_sessions_and_log_out(alice, now):
    clients = [Client() for _ in range(3)]
    for c in clients:
        log_in(c, alice.email)
    clients[0].post("/settings/security/sessions/revoke-others/")
    assert [c.get("/").status_code for c in clients] == [200, 302, 302]
    clients[0].post("/logout/")
    assert UserSession.objects.filter(user=alice).count() == 0
    assert clients[0].get("/").status_code == 302
