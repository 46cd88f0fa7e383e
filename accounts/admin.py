from datetime import timedelta
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache

from accounts import services
from accounts.models import (
    ApiKey,
    ApiScope,
    AuditEntry,
    Membership,
    Owner,
    Partner,
    PartnerMember,
    User,
)


@admin.register(User)
class UserAdmin(DjangoUserAdmin[User]):
    ordering = ("email",)
    list_display = ("email", "full_name", "is_staff", "is_active", "last_login")
    list_filter = ("is_staff", "is_superuser", "is_active")
    search_fields = ("email", "full_name")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Person", {"fields": ("full_name",)}),
        ("Access", {"fields": ("is_active", "is_staff", "is_superuser", "groups")}),
        ("Dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)
    readonly_fields = ("last_login", "date_joined")
    filter_horizontal = ("groups",)


class MembershipInline(admin.TabularInline[Membership, Owner]):
    model = Membership
    extra = 0
    raw_id_fields = ("user",)


@admin.register(Owner)
class OwnerAdmin(admin.ModelAdmin[Owner]):
    list_display = (
        "account_number",
        "legal_name",
        "kind",
        "contact_email",
        "billing_currency",
        "time_zone",
    )
    list_filter = ("kind", "billing_currency")
    search_fields = ("legal_name", "contact_email", "=account_number")
    readonly_fields = ("account_number",)
    inlines: ClassVar = [MembershipInline]


class PartnerMemberInline(admin.TabularInline[PartnerMember, Partner]):
    model = PartnerMember
    extra = 0
    raw_id_fields = ("user",)


@admin.register(Partner)
class PartnerAdmin(admin.ModelAdmin[Partner]):
    list_display = ("name", "handle", "contact_email", "created_at")
    search_fields = ("name", "handle", "contact_email")
    inlines: ClassVar = [PartnerMemberInline]


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin[AuditEntry]):
    """The audit trail: searchable, never editable (the database refuses it anyway)."""

    list_display = ("at", "action", "object_type", "object_repr", "actor", "reason")
    list_select_related = ("actor",)
    list_filter = ("action", "object_type")
    search_fields = ("=object_id", "object_repr", "action", "actor__email", "=request_id")
    date_hierarchy = "at"
    show_full_result_count = False
    list_per_page = 100
    readonly_fields = (
        "at",
        "actor",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "reason",
        "before",
        "after",
        "request_id",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class PartnerKeyForm(forms.Form):
    partner = forms.ModelChoiceField(queryset=Partner.objects.order_by("name"))
    name = forms.CharField(max_length=100, help_text="Tells this key apart, e.g. 'billing sync'.")
    scopes = forms.MultipleChoiceField(
        choices=ApiScope.choices, widget=forms.CheckboxSelectMultiple
    )
    lifetime_days = forms.IntegerField(
        min_value=1, max_value=366, initial=90, help_text="The key stops working after this."
    )


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    """Partner and personal API keys. Operators make partner keys here (the token is shown
    once, on the page that made it); nothing is edited, a key is only revoked."""

    list_display = (
        "prefix",
        "name",
        "partner",
        "owner",
        "scope_list",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_select_related = ("partner", "owner")
    list_filter = ("partner",)
    search_fields = ("=prefix", "name", "partner__name", "owner__legal_name")
    actions = ("revoke",)
    readonly_fields = tuple(f.name for f in ApiKey._meta.fields if f.name != "secret_sha256")
    exclude = ("secret_sha256",)

    @admin.display(description="scopes")
    def scope_list(self, obj: ApiKey) -> str:
        return ", ".join(obj.scopes)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("accounts.add_apikey")

    @admin.action(
        description="Revoke the selected keys (at their next request)", permissions=["revoke"]
    )
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        if not isinstance(request.user, User):
            raise TypeError("console actions run behind login: the request has a user")
        for key in queryset.order_by("pk"):
            services.api_key_revoke(key=key, by=request.user)
        self.message_user(request, f"Revoked {len(queryset)} keys.", messages.SUCCESS)

    @method_decorator(never_cache)
    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if not self.has_add_permission(request):
            return HttpResponse(status=403)
        if not isinstance(request.user, User):
            raise TypeError("console pages run behind login: the request has a user")
        form = PartnerKeyForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                key, token = services.api_key_create(
                    name=data["name"],
                    scopes=data["scopes"],
                    expires_at=timezone.now() + timedelta(days=data["lifetime_days"]),
                    by=request.user,
                    partner=data["partner"],
                )
            except ValidationError as error:
                form.add_error(None, error)
            else:
                return TemplateResponse(
                    request,
                    "admin/accounts/apikey/token.html",
                    {
                        **self.admin_site.each_context(request),
                        "key": key,
                        "token": token,
                        "title": "Partner API key made",
                        "opts": self.opts,
                    },
                )
        return TemplateResponse(
            request,
            "admin/accounts/apikey/add.html",
            {
                **self.admin_site.each_context(request),
                "form": form,
                "title": "Make a partner API key",
                "opts": self.opts,
            },
            status=400 if form.errors else 200,
        )
