from typing import ClassVar

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.http import HttpRequest

from accounts.models import AuditEntry, Membership, Owner, Partner, PartnerMember, User


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
    list_display = ("legal_name", "kind", "contact_email", "billing_currency", "time_zone")
    list_filter = ("kind", "billing_currency")
    search_fields = ("legal_name", "contact_email")
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
