"""People and organisations: who logs in, who owns GPUs, who integrates as a partner."""

from __future__ import annotations

import uuid
import zoneinfo
from typing import Any, ClassVar

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **fields: Any) -> User:
        if not email:
            raise ValueError("A user needs an email address.")
        user = self.model(email=self.normalize_email(email).lower(), **fields)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **fields: Any) -> User:
        fields.update(is_staff=True, is_superuser=True)
        return self.create_user(email, password, **fields)


class User(AbstractBaseUser, PermissionsMixin):
    """A person who logs in. Email is the login; staff users are operators."""

    email = models.EmailField("email address", max_length=254, unique=True)
    full_name = models.CharField(max_length=200, blank=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(
        default=False, help_text="Operators: may log in to the operator console."
    )
    date_joined = models.DateTimeField(default=timezone.now)

    objects: ClassVar[UserManager] = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(Lower("email"), name="accounts_user_email_ci_unique"),
        ]

    def __str__(self) -> str:
        return self.email

    def clean(self) -> None:
        super().clean()
        self.email = self.__class__.objects.normalize_email(self.email).lower()


def validate_timezone(value: str) -> None:
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"{value!r} is not an IANA time zone (e.g. Europe/Berlin).")


def validate_currency(value: str) -> None:
    if len(value) != 3 or not value.isalpha() or not value.isupper():
        raise ValidationError(f"{value!r} is not an ISO 4217 currency code (e.g. EUR).")


# Owners' account numbers: six digits and up, from 100001 (accounts migration 0006).
ACCOUNT_NUMBER_SEQUENCE = "accounts_owner_account_number_seq"


class Owner(models.Model):
    """A customer that owns GPUs, wholly or in part: a person or a company."""

    class Kind(models.TextChoices):
        PERSON = "person", "Person"
        COMPANY = "company", "Company"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    legal_name = models.CharField(max_length=200)
    contact_email = models.EmailField()
    billing_currency = models.CharField(max_length=3, default="USD", validators=[validate_currency])
    time_zone = models.CharField(
        max_length=64,
        default="UTC",
        validators=[validate_timezone],
        help_text="For display only; all accounting is in UTC.",
    )
    # Printed on statements. The database numbers every new owner from a sequence (accounts
    # migration 0006), so each has one from the moment it exists and it is never reused.
    # Unique by an index of that migration, not by ``unique=True``: Django's unique check in
    # ``full_clean`` would compare with the default itself, and a ``nextval`` in a WHERE
    # clause takes a number for every row it scans.
    account_number = models.BigIntegerField(
        editable=False,
        db_default=models.Func(models.Value(ACCOUNT_NUMBER_SEQUENCE), function="nextval"),
        help_text="Assigned by the database; printed on statements.",
    )
    postal_address = models.TextField(
        blank=True,
        help_text="As printed on statements: one line per line of the address.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["legal_name"]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=models.Q(billing_currency__regex=r"^[A-Z]{3}$"),
                name="accounts_owner_currency_iso4217",
            ),
        ]

    def __str__(self) -> str:
        return self.legal_name


class Membership(models.Model):
    """A user acting for an owner: admins manage the account, viewers only look."""

    class Role(models.TextChoices):
        ADMIN = "admin", "Admin"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    owner = models.ForeignKey(Owner, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["user", "owner"], name="accounts_membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} → {self.owner} ({self.role})"


class Partner(models.Model):
    """An integrating organisation (marketplace, accountant, reseller) reading granted data.

    ``handle`` is public: a partner gives it to owners, who type it in the portal to grant
    access (ids stay internal, and a name can be mistyped into a look-alike).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, unique=True)
    handle = models.SlugField(
        max_length=50,
        unique=True,
        help_text="Public identifier owners type to grant this partner access, e.g. carol-market.",
    )
    contact_email = models.EmailField()
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["name"]

    def __str__(self) -> str:
        return self.name


class PartnerMember(models.Model):
    """A user who works for a partner organisation."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="partner_memberships")
    partner = models.ForeignKey(Partner, on_delete=models.CASCADE, related_name="members")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["user", "partner"], name="accounts_partnermember_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.partner}"


class AuditEntry(models.Model):
    """One change to something that matters, as it happened: who, when, why, before and after.

    Append-only: the database refuses UPDATE and DELETE (migration 0002), so the trail cannot
    be quietly rewritten. ``object_type`` is ``app_label.model`` of the thing changed (for GPU
    ownership and placement, the GPU itself) and ``object_id`` its primary key as text.
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(default=timezone.now, editable=False)
    actor = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_entries"
    )
    action = models.CharField(max_length=64, help_text="What happened, e.g. ownership.transfer.")
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    before = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    request_id = models.CharField(max_length=128, blank=True)

    class Meta:
        ordering: ClassVar = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes: ClassVar = [
            models.Index(fields=["object_type", "object_id", "at"]),
            models.Index(fields=["actor", "at"]),
            models.Index(fields=["at"]),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.object_type}:{self.object_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class Disclosure(models.Model):
    """A version of the risk disclosure: text stored unchanged, with its SHA-256.

    Once published it is immutable (database trigger, migration 0003): a new wording is a new
    version. The trigger also refuses a hash that is not the hash of the text.
    """

    version = models.CharField(max_length=32, unique=True)
    text = models.TextField()
    text_sha256 = models.CharField(max_length=64)
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering: ClassVar = ["-published_at", "-created_at"]

    def __str__(self) -> str:
        return f"disclosure {self.version}"


class DisclosureAcknowledgement(models.Model):
    """A user acknowledged a disclosure version (owners must, before seeing earnings)."""

    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="acknowledgements")
    disclosure = models.ForeignKey(
        Disclosure, on_delete=models.PROTECT, related_name="acknowledgements"
    )
    at = models.DateTimeField(default=timezone.now)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.TextField(blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["user", "disclosure"], name="accounts_acknowledgement_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} acknowledged {self.disclosure_id}"


class ApiScope(models.TextChoices):
    """What an API key or a partner grant allows; every endpoint needs exactly one."""

    FLEET_READ = "fleet:read", "Read GPUs, ownership, placement, incidents and maintenance"
    TELEMETRY_READ = "telemetry:read", "Read availability and utilization series"
    STATEMENTS_READ = "statements:read", "Read statements, their lines and payouts"
    WEBHOOKS_MANAGE = "webhooks:manage", "Manage webhook endpoints"


def validate_scopes(value: list[str]) -> None:
    unknown = sorted(set(value) - set(ApiScope.values))
    if unknown or not value:
        raise ValidationError(
            f"Give one or more of {', '.join(ApiScope.values)}; unknown: {', '.join(unknown)}."
        )


class PartnerGrant(models.Model):
    """An owner lets a partner read its data within ``scopes``, until revoked.

    At most one live grant per owner and partner (the database refuses a second); changing
    scopes is a revocation and a new grant, so the trail shows what was allowed when.
    """

    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="partner_grants")
    partner = models.ForeignKey(Partner, on_delete=models.PROTECT, related_name="grants")
    scopes = ArrayField(models.CharField(max_length=32), validators=[validate_scopes])
    granted_by = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+")
    granted_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering: ClassVar = ["-granted_at"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["owner", "partner"],
                condition=models.Q(revoked_at__isnull=True),
                name="accounts_partnergrant_one_live",
            ),
            models.CheckConstraint(
                condition=models.Q(scopes__contained_by=list(ApiScope.values))
                & ~models.Q(scopes=[]),
                name="accounts_partnergrant_known_scopes",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} → {self.partner_id} {','.join(self.scopes)}"


class ApiKey(models.Model):
    """A key for the partner API: ``stw_live_<prefix>_<secret>``, shown once.

    Only the SHA-256 of the whole token is stored; ``prefix`` finds the row. A key belongs to
    a partner (reads what owners granted that partner) or is personal to an owner account
    (``owner``, made by one of its users, reads only that account while the user stays a
    member). It stops working when revoked or expired, at the very next request.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    prefix = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    name = models.CharField(max_length=100)
    scopes = ArrayField(models.CharField(max_length=32), validators=[validate_scopes])
    partner = models.ForeignKey(
        Partner, on_delete=models.PROTECT, null=True, blank=True, related_name="api_keys"
    )
    owner = models.ForeignKey(
        Owner, on_delete=models.PROTECT, null=True, blank=True, related_name="api_keys"
    )
    created_by = models.ForeignKey(User, on_delete=models.PROTECT, related_name="api_keys")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at"]
        constraints: ClassVar = [
            models.CheckConstraint(
                condition=models.Q(partner__isnull=True) ^ models.Q(owner__isnull=True),
                name="accounts_apikey_partner_xor_owner",
            ),
            models.CheckConstraint(
                condition=models.Q(scopes__contained_by=list(ApiScope.values))
                & ~models.Q(scopes=[]),
                name="accounts_apikey_known_scopes",
            ),
            models.CheckConstraint(
                condition=models.Q(expires_at__gt=models.F("created_at")),
                name="accounts_apikey_expires_after_creation",
            ),
        ]

    def __str__(self) -> str:
        return f"stw_live_{self.prefix}_… ({self.name})"
