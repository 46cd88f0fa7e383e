"""Logging in (password, then the second factor when the user has one), logging out, and
password reset pages."""

from __future__ import annotations

import time

import django_otp
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import authenticate, login, logout
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST
from django_otp import user_has_device

from accounts.models import User
from accounts.services import otp_device_verify
from portal import conf
from portal.forms import CodeForm, LoginForm, QueuedPasswordResetForm
from portal.services import throttle
from portal.services.sessions import client_ip, session_forget, session_record
from portal.views.common import now

PENDING = "portal_pending_login"  # session key: the user whose password was accepted


def _next(request: HttpRequest, candidate: str | None) -> str:
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return reverse("portal:home")


def _locked(
    request: HttpRequest, form: LoginForm | CodeForm, lock: throttle.Lockout
) -> HttpResponse:
    form.add_error(None, lock.message(now=now()))
    template = "portal/login.html" if isinstance(form, LoginForm) else "portal/login_verify.html"
    response = render(
        request, template, {"form": form, "next": request.POST.get("next", "")}, status=429
    )
    response["Retry-After"] = str(lock.retry_after_s(now=now()))
    return response


def _complete(
    request: HttpRequest, user: User, device: django_otp.models.Device | None, target: str
) -> HttpResponse:
    login(request, user, backend=settings.AUTHENTICATION_BACKENDS[0])
    if device is not None:
        django_otp.login(request, device)
    throttle.login_success_record(email=user.email)
    session_record(request=request, user=user)
    return HttpResponseRedirect(target)


@sensitive_post_parameters("password")
@csrf_protect
@never_cache
def login_view(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated and request.method == "GET":
        return redirect(_next(request, request.GET.get("next")))
    form = LoginForm(request.POST or None)
    target = request.POST.get("next") or request.GET.get("next", "")
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["username"].strip().lower()
        ip = client_ip(request)
        lock = throttle.login_lockout(email=email, ip=ip, now=now())
        if lock is not None:
            return _locked(request, form, lock)
        user = authenticate(request, username=email, password=form.cleaned_data["password"])
        if not isinstance(user, User):
            lock = throttle.login_failure_record(email=email, ip=ip, now=now())
            if lock is not None:
                return _locked(request, form, lock)
            form.add_error(
                None,
                "Please enter a correct email address and password. Note that both fields "
                "may be case-sensitive.",
            )
        elif user_has_device(user):
            request.session[PENDING] = {
                "user": user.pk,
                "at": time.time(),
                "next": _next(request, target),
            }
            return redirect("portal:login-verify")
        else:
            return _complete(request, user, None, _next(request, target))
    return render(request, "portal/login.html", {"form": form, "next": target})


@sensitive_post_parameters("code")
@csrf_protect
@never_cache
def login_verify(request: HttpRequest) -> HttpResponse:
    """Second step: the password was right; now the authenticator's code or a recovery code."""
    pending = request.session.get(PENDING) or {}
    user = User.objects.filter(pk=int(pending.get("user") or 0), is_active=True).first()
    if user is None or time.time() - pending.get("at", 0) > conf.second_factor_timeout_s():
        request.session.pop(PENDING, None)
        messages.info(request, "Please log in again.")
        return redirect("portal:login")
    form = CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        ip = client_ip(request)
        lock = throttle.login_lockout(email=user.email, ip=ip, now=now())
        if lock is not None:
            return _locked(request, form, lock)
        device = otp_device_verify(user=user, token=form.cleaned_data["code"])
        if device is None:
            lock = throttle.login_failure_record(email=user.email, ip=ip, now=now())
            if lock is not None:
                request.session.pop(PENDING, None)
                return _locked(request, form, lock)
            form.add_error("code", "That code is not valid (or was already used).")
        else:
            request.session.pop(PENDING, None)
            return _complete(request, user, device, pending["next"])
    return render(request, "portal/login_verify.html", {"form": form})


@require_POST
@csrf_protect
def logout_view(request: HttpRequest) -> HttpResponse:
    session_forget(session_key=request.session.session_key)
    logout(request)
    messages.success(request, "You are logged out.")
    return redirect("portal:login")


password_reset = auth_views.PasswordResetView.as_view(
    template_name="portal/password_reset.html",
    form_class=QueuedPasswordResetForm,
    success_url=reverse_lazy("portal:password-reset-sent"),
)
password_reset_sent = auth_views.PasswordResetDoneView.as_view(
    template_name="portal/password_reset_sent.html"
)
password_reset_confirm = auth_views.PasswordResetConfirmView.as_view(
    template_name="portal/password_reset_confirm.html",
    success_url=reverse_lazy("portal:password-reset-done"),
)
password_reset_done = auth_views.PasswordResetCompleteView.as_view(
    template_name="portal/password_reset_done.html"
)
