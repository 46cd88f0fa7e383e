"""Partner access and personal API keys: who may read an owner account through the API.

Grants and keys are written by ``accounts.services`` (which audit every change and refuse
whoever may not); these views list what ``portal.access`` lets the user see. Revoking takes
effect at the partner's or key's very next request: the API checks both on every request.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts import services as accounts
from accounts.models import ApiKey, ApiScope, Owner, PartnerGrant
from portal.access import (
    api_key_for_user,
    api_keys_for_user,
    owners_administered,
    owners_of_user,
    partner_grant_for_user,
    partner_grants_for_user,
)
from portal.forms import ApiKeyForm, PartnerGrantForm
from portal.views.common import (
    disclosure_is_acknowledged,
    disclosure_redirect,
    now,
    owner_view,
    the_user,
)


def _choices(owners: list[Owner]) -> list[tuple[str, str]]:
    return [(str(o.pk), o.legal_name) for o in owners]


def _refused(request: HttpRequest, error: ValidationError) -> HttpResponse:
    return render(request, "portal/refused.html", {"reasons": error.messages}, status=403)


# ---- partner access ----------------------------------------------------------------------------


@owner_view
def partners(request: HttpRequest) -> HttpResponseBase:
    """Grants on the user's accounts; an admin of an account grants and revokes here."""
    user = the_user(request)
    administered = list(owners_administered(user=user))
    form = PartnerGrantForm(request.POST or None, owners=_choices(administered))
    status = 200
    if request.method == "POST":
        if not administered:
            return _refused(
                request,
                ValidationError("Only an admin of the owner account can grant partner access."),
            )
        if form.is_valid():
            owner = next(o for o in administered if str(o.pk) == form.cleaned_data["owner"])
            partner = form.cleaned_data["handle"]
            try:
                accounts.partner_grant_create(
                    owner=owner, partner=partner, scopes=form.cleaned_data["scopes"], by=user
                )
            except ValidationError as error:
                form.add_error(None, error)
            else:
                messages.success(
                    request,
                    f"{partner.name} can now read {owner.legal_name} within "
                    f"{', '.join(sorted(form.cleaned_data['scopes']))}.",
                )
                return redirect("portal:partners")
        status = 400
    admin_of = {o.pk for o in administered}
    grants = list(
        partner_grants_for_user(user=user)
        .select_related("owner", "partner", "granted_by", "revoked_by")
        .order_by("revoked_at", "owner__legal_name", "partner__name", "-granted_at")
    )
    rows = [{"grant": g, "can_revoke": g.owner_id in admin_of and not g.revoked_at} for g in grants]
    return render(
        request,
        "portal/partners.html",
        {"form": form, "rows": rows, "can_grant": bool(administered)},
        status=status,
    )


@owner_view
@require_POST
def partner_revoke(request: HttpRequest, grant_id: int) -> HttpResponseBase:
    user = the_user(request)
    grant: PartnerGrant = partner_grant_for_user(user=user, grant_id=grant_id)
    try:
        accounts.partner_grant_revoke(grant=grant, by=user)
    except ValidationError as error:
        return _refused(request, error)
    messages.success(
        request,
        f"Access for {grant.partner.name} to {grant.owner.legal_name} is revoked; its next "
        "request is refused.",
    )
    return redirect("portal:partners")


# ---- personal API keys -----------------------------------------------------------------------


@owner_view
def api_keys(request: HttpRequest) -> HttpResponseBase:
    """Keys of the user's accounts the user made (all of an account's, for its admin); a new
    key's token is shown on this answer only, never again. A key that reads earnings
    (``statements:read``) is made only once the user has acknowledged the current risk
    disclosure (``earnings_view``'s gate): until then the user is sent to it, and back here."""
    user = the_user(request)
    owners = list(owners_of_user(user=user))
    form = ApiKeyForm(request.POST or None, owners=_choices(owners))
    created: tuple[ApiKey, str] | None = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            if ApiScope.STATEMENTS_READ in form.cleaned_data["scopes"] and not (
                disclosure_is_acknowledged(user)
            ):
                messages.info(
                    request,
                    "Acknowledge the risk disclosure before making a key that reads statements.",
                )
                return disclosure_redirect(reverse("portal:api-keys"))
            owner = next(o for o in owners if str(o.pk) == form.cleaned_data["owner"])
            try:
                created = accounts.api_key_create(
                    name=form.cleaned_data["name"],
                    scopes=form.cleaned_data["scopes"],
                    expires_at=now() + timedelta(days=form.cleaned_data["expires_in_days"]),
                    by=user,
                    owner=owner,
                )
            except ValidationError as error:
                form.add_error(None, error)
        if created is None:
            status = 400
        else:
            form = ApiKeyForm(None, owners=_choices(owners))
    keys = list(
        api_keys_for_user(user=user)
        .select_related("owner", "created_by")
        .order_by("revoked_at", "-created_at")
    )
    context: dict[str, Any] = {
        "form": form,
        "keys": keys,
        "created": created,
        "at": now(),
        "has_owners": bool(owners),
    }
    return render(request, "portal/api_keys.html", context, status=status)


@owner_view
@require_POST
def api_key_revoke(request: HttpRequest, key_id: Any) -> HttpResponseBase:
    user = the_user(request)
    key = api_key_for_user(user=user, key_id=key_id)
    accounts.api_key_revoke(key=key, by=user)
    messages.success(
        request,
        f"The key {key.name} (stw_live_{key.prefix}_…) is revoked; its next request is refused.",
    )
    return redirect("portal:api-keys")
