"""The operator console for billing. Every change goes through ``billing.services``: periods
are closed and reconciled by actions, statements published by a request and a second
operator's approval, and money rows are entered through forms that call the services.
Nothing published, and no ledger row, is ever edited or deleted here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from accounts.admin_site import DashboardPanel, UtcColumns, dashboard_panel_register
from accounts.admin_toolkit import ServiceForm, ServiceWriteAdmin, run_each
from accounts.models import User
from billing.admin_close import close_view
from billing.models import (
    Adjustment,
    ClusterBilling,
    Payout,
    Period,
    PoolRevenue,
    RateCard,
    Rental,
    Statement,
    StatementLine,
)
from billing.selectors.close import period_statements
from billing.selectors.history import audit_trail, period_history
from billing.selectors.pending import telemetry_pending
from billing.services import closing, ledger, periods, publishing, reconciliation, revenue
from fleet.models import Gpu
from fleet.models.ownership import share_percent


def _user(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User):
        raise TypeError("console pages run behind login: the request has a user")
    return user


REASON_HELP = "Optional: why, kept in the audit trail with the change."


def reason_field() -> forms.CharField:
    """The reason an operator may give for a change, kept in its audit entry."""
    return forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text=REASON_HELP
    )


class AuditTrailAdmin[M: Any](UtcColumns[M]):
    """A billing page shows its object's audit trail below it (``change_form.html`` of the
    app), as a GPU's page shows its own."""

    audit_trail_title = "Audit trail"

    def audit_entries(self, obj: Any) -> list[Any]:
        return audit_trail(obj=obj)

    def page_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        return {
            **super().page_context(request, obj),
            "audit_trail": self.audit_entries(obj),
            "audit_trail_title": self.audit_trail_title,
        }


class AddOnlyAdmin[M: Any](ServiceWriteAdmin[M], AuditTrailAdmin[M]):
    """Rows entered through a service form (written in ``save_model``, see
    ``accounts.admin_toolkit``); never changed or deleted afterwards."""

    show_full_result_count = False
    list_per_page = 100

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PeriodForm(forms.ModelForm):  # type: ignore[type-arg]
    year = forms.IntegerField(min_value=2000, max_value=2999)
    month = forms.IntegerField(min_value=1, max_value=12)

    class Meta:
        model = Period
        fields: list[str] = []


# What a period's page offers to do next, by its status: (action, button label).
PERIOD_NEXT: dict[str, list[tuple[str, str]]] = {
    Period.Status.OPEN: [("close", "Close: compute the draft statements")],
    Period.Status.CLOSING: [
        ("recompute", "Recompute the draft statements"),
        ("finish", "Finish closing (all statements published)"),
    ],
    Period.Status.CLOSED: [("reconcile", "Reconcile (differences → adjustments)")],
}


@admin.register(Period)
class PeriodAdmin(AuditTrailAdmin[Period]):
    form = PeriodForm
    list_display = ("__str__", "start", "end", "status", "closing_started_at", "closed_at")
    list_filter = ("status",)
    actions = ("close", "recompute", "finish", "reconcile")
    # A period's page shows what it is; the year and month are only asked when adding one.
    shown = ("start", "end", "status", "closing_started_at", "closed_at", "created_at")
    audit_trail_title = "Billing history of this period"

    def audit_entries(self, obj: Any) -> list[Any]:
        return period_history(period=obj)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        own = [
            path("<path:object_id>/close/", wrap(self.close_view), name="billing_period_close"),
        ]
        return [*own, *super().get_urls()]

    def close_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The guided close (``billing.admin_close``)."""
        return close_view(self, request, object_id)

    def has_close_permission(self, request: HttpRequest) -> bool:
        """Read-only operators see periods; only these may close them."""
        return request.user.has_perm("billing.close_period")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("year", "month") if obj is None else self.shown

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.shown

    def page_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        """The period's page offers the close steps its status allows, as buttons that run
        the same actions as the list (for operators who may close periods)."""
        allowed = self.has_close_permission(request)
        return {
            **super().page_context(request, obj),
            "period_next": PERIOD_NEXT.get(obj.status, []) if allowed else [],
            "period_statements": period_statements(period=obj).labelled(),
        }

    def save_model(self, request: HttpRequest, obj: Period, form: Any, change: bool) -> None:
        made = periods.period_for_month(
            year=form.cleaned_data["year"], month=form.cleaned_data["month"]
        )
        obj.pk, obj.start, obj.end, obj.status = made.pk, made.start, made.end, made.status
        obj._state.adding = False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Close: compute the draft statements", permissions=["close"])
    def close(self, request: HttpRequest, queryset: QuerySet[Period]) -> None:
        run_each(
            self,
            request,
            queryset.order_by("start"),
            lambda p: closing.period_close(period=p, by=_user(request)),
        )

    @admin.action(description="Recompute the drafts of closing periods", permissions=["close"])
    def recompute(self, request: HttpRequest, queryset: QuerySet[Period]) -> None:
        run_each(
            self,
            request,
            queryset.order_by("start"),
            lambda p: closing.period_close_run(period=p, by=_user(request)),
        )

    @admin.action(description="Finish closing (all statements published)", permissions=["close"])
    def finish(self, request: HttpRequest, queryset: QuerySet[Period]) -> None:
        run_each(
            self,
            request,
            queryset.order_by("start"),
            lambda p: closing.period_close_finish(period=p, by=_user(request)),
        )

    @admin.action(description="Reconcile (differences → adjustments)", permissions=["close"])
    def reconcile(self, request: HttpRequest, queryset: QuerySet[Period]) -> None:
        run_each(
            self,
            request,
            queryset.order_by("start"),
            lambda p: reconciliation.period_reconcile(period=p, by=_user(request)),
        )


class StatementLineInline(admin.TabularInline[StatementLine, Statement]):
    model = StatementLine
    extra = 0
    can_delete = False
    fields = (
        "position",
        "kind",
        "gpu",
        "description",
        "starts_at",
        "ends_at",
        "share",
        "up_s",
        "down_s",
        "maintenance_s",
        "no_data_s",
        "availability",
        "utilization",
        "energy_kwh",
        "gross",
        "hosting_fee",
        "power_cost",
        "management_fee",
        "net",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="share")
    def share(self, line: StatementLine) -> str:
        return "—" if line.share_bps is None else share_percent(line.share_bps)


@admin.register(Statement)
class StatementAdmin(AuditTrailAdmin[Statement]):
    list_display = (
        "owner",
        "period",
        "currency",
        "status",
        "lines_total",
        "closing_balance",
        "requested_by",
        "approved_by",
    )
    list_filter = ("status", "period", "currency")
    list_select_related = ("owner", "period", "requested_by", "approved_by")
    search_fields = ("owner__legal_name",)
    show_full_result_count = False
    inlines = (StatementLineInline,)
    exclude = ("frozen_inputs",)
    actions = ("request_publish", "approve_publish", "recompute_owner")

    def has_publish_permission(self, request: HttpRequest) -> bool:
        """Read-only operators see statements; only these may request or approve publishing."""
        return request.user.has_perm("billing.publish_statement")

    def has_close_permission(self, request: HttpRequest) -> bool:
        """Those who may close periods may redraft an owner's drafts of a closing one."""
        return request.user.has_perm("billing.close_period")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [f.name for f in Statement._meta.fields if f.name != "frozen_inputs"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Request publishing", permissions=["publish"])
    def request_publish(self, request: HttpRequest, queryset: QuerySet[Statement]) -> None:
        run_each(
            self,
            request,
            queryset.order_by("pk"),
            lambda s: publishing.statement_publish_request(statement=s, by=_user(request)),
        )

    @admin.action(description="Approve publishing (a second operator)", permissions=["publish"])
    def approve_publish(self, request: HttpRequest, queryset: QuerySet[Statement]) -> None:
        run_each(
            self,
            request,
            queryset.order_by("pk"),
            lambda s: publishing.statement_publish_approve(statement=s, by=_user(request)),
        )

    @admin.action(
        description="Recompute these owners' drafts (keeps each pool's split)",
        permissions=["close"],
    )
    def recompute_owner(self, request: HttpRequest, queryset: QuerySet[Statement]) -> None:
        """Each selected statement's owner in its period, once (an owner billed in two
        currencies has two statements and one redraft)."""
        pairs = sorted(
            {(s.period, s.owner) for s in queryset.select_related("period", "owner")},
            key=lambda pair: (pair[0].start, pair[1].legal_name, str(pair[1].pk)),
        )
        run_each(
            self,
            request,
            pairs,
            lambda pair: closing.owner_statements_recompute(
                period=pair[0], owner=pair[1], by=_user(request)
            ),
        )


class RateCardForm(ServiceForm):
    class Meta:
        model = RateCard
        fields = (
            "cluster",
            "currency",
            "effective_from",
            "effective_to",
            "hosting_fee_per_gpu_month",
            "price_per_kwh",
            "pue",
            "management_fee_pct",
            "waive_hosting_in_operator_incidents",
            "waive_hosting_when_down",
        )

    reason = reason_field()

    def create(self, data: dict[str, Any], by: User) -> Any:
        return revenue.rate_card_create(by=by, **data)


class RateCardEndForm(forms.Form):
    at = forms.DateTimeField(
        label="Ends at", help_text="UTC, a whole second: e.g. 2026-04-01 00:00:00."
    )
    reason = reason_field()


@admin.register(RateCard)
class RateCardAdmin(AddOnlyAdmin[RateCard]):
    form = RateCardForm
    list_display = (
        "cluster",
        "currency",
        "effective_from",
        "effective_to",
        "hosting_fee_per_gpu_month",
        "price_per_kwh",
        "pue",
        "management_fee_pct",
    )
    list_select_related = ("cluster__site",)
    list_filter = ("currency",)
    actions = ("end_card",)

    def has_end_permission(self, request: HttpRequest) -> bool:
        """Whoever may add rate cards may end one, so that a new card can follow it."""
        return request.user.has_perm("billing.add_ratecard")

    @admin.action(description="End the selected rate card at…", permissions=["end"])
    def end_card(self, request: HttpRequest, queryset: QuerySet[RateCard]) -> Any:
        cards = list(queryset.order_by("pk")[:2])
        if len(cards) != 1:
            self.message_user(request, "Select exactly one rate card to end.", messages.ERROR)
            return None
        (card,) = cards
        submitted = "apply" in request.POST
        form = RateCardEndForm(request.POST if submitted else None)
        if submitted and form.is_valid():
            try:
                revenue.rate_card_end(
                    card=card,
                    at=form.cleaned_data["at"],
                    by=_user(request),
                    reason=form.cleaned_data["reason"],
                )
            except ValidationError as error:
                for message in error.message_dict.get("at", error.messages):
                    form.add_error("at", message)
            else:
                self.message_user(request, f"{card} now ends at {form.cleaned_data['at']}.")
                return None
        context = {
            **self.admin_site.each_context(request),
            "title": "End a rate card",
            "opts": self.opts,
            "form": form,
            "card": card,
        }
        return TemplateResponse(request, "admin/billing/ratecard/end.html", context)


class PoolBasisForm(ServiceForm):
    class Meta:
        model = ClusterBilling
        fields = ("cluster", "pool_split_basis", "effective_from", "reason")
        help_texts = {
            "effective_from": "UTC, the first second of a month: 2026-04-01 00:00:00. A change "
            "takes effect only at a period's start, and never in a closing or closed period."
        }

    def create(self, data: dict[str, Any], by: User) -> Any:
        return revenue.cluster_pool_basis_set(
            cluster=data["cluster"],
            basis=data["pool_split_basis"],
            effective_from=data["effective_from"],
            reason=data["reason"],
            by=by,
        )


@admin.register(ClusterBilling)
class ClusterBillingAdmin(AddOnlyAdmin[ClusterBilling]):
    """A cluster's pool basis over time: each row holds from its month until the next one."""

    form = PoolBasisForm
    list_display = (
        "cluster",
        "effective_from",
        "pool_split_basis",
        "reason",
        "created_by",
        "created_at",
    )
    list_select_related = ("cluster__site", "created_by")
    list_filter = ("pool_split_basis",)


class RentalForm(ServiceForm):
    gpu_serials = forms.CharField(help_text="GPU serials, separated by commas or spaces.")
    reason = reason_field()

    class Meta:
        model = Rental
        fields = (
            "cluster",
            "starts_at",
            "ends_at",
            "rate_per_gpu_hour",
            "currency",
            "customer_reference",
        )

    def create(self, data: dict[str, Any], by: User) -> Any:
        serials = [s for s in data.pop("gpu_serials").replace(",", " ").split() if s]
        gpus = list(Gpu.objects.filter(serial__in=serials))
        missing = sorted(set(serials) - {g.serial for g in gpus})
        if missing:
            raise ValidationError({"gpu_serials": f"unknown serials: {', '.join(missing)}."})
        return revenue.rental_create(gpus=gpus, by=by, **data)


@admin.register(Rental)
class RentalAdmin(AddOnlyAdmin[Rental]):
    form = RentalForm
    list_display = (
        "pk",
        "cluster",
        "starts_at",
        "ends_at",
        "rate_per_gpu_hour",
        "currency",
        "customer_reference",
    )
    list_select_related = ("cluster__site",)


class PoolForm(ServiceForm):
    class Meta:
        model = PoolRevenue
        fields = ("cluster", "period", "amount", "currency", "description")

    reason = reason_field()

    def create(self, data: dict[str, Any], by: User) -> Any:
        return revenue.pool_add(by=by, **data)


@admin.register(PoolRevenue)
class PoolRevenueAdmin(AddOnlyAdmin[PoolRevenue]):
    form = PoolForm
    list_display = ("cluster", "period", "amount", "currency", "description")
    list_select_related = ("cluster__site", "period")


class PayoutForm(ServiceForm):
    class Meta:
        model = Payout
        fields = ("owner", "currency", "amount", "paid_on", "reference")

    reason = reason_field()

    def create(self, data: dict[str, Any], by: User) -> Any:
        return ledger.payout_record(by=by, **data)


@admin.register(Payout)
class PayoutAdmin(AddOnlyAdmin[Payout]):
    form = PayoutForm
    list_display = ("owner", "currency", "amount", "paid_on", "reference")
    list_select_related = ("owner",)
    raw_id_fields = ("owner",)


class AdjustmentForm(ServiceForm):
    class Meta:
        model = Adjustment
        fields = ("owner", "period", "currency", "amount", "reason")

    def create(self, data: dict[str, Any], by: User) -> Any:
        return ledger.adjustment_add(by=by, **data)


@admin.register(Adjustment)
class AdjustmentAdmin(AddOnlyAdmin[Adjustment]):
    form = AdjustmentForm
    list_display = (
        "owner",
        "period",
        "currency",
        "amount",
        "source",
        "corrects_statement",
        "created_at",
    )
    list_filter = ("source", "currency")
    list_select_related = (
        "owner",
        "period",
        "corrects_statement__owner",
        "corrects_statement__period",
    )
    raw_id_fields = ("owner",)


# ---- the front page: where the close stands ---------------------------------------------------


def billing_panel(*, now: datetime) -> dict[str, Any]:
    """The period running now, and the period whose close comes first: the oldest that has
    ended and is not closed (closing, or still open), with its statements and whether its
    telemetry is complete (what closing checks first)."""
    running = Period.objects.filter(start__lte=now, end__gt=now).first()
    due = (
        Period.objects.filter(end__lte=now)
        .exclude(status=Period.Status.CLOSED)
        .order_by("start")
        .first()
    )
    last_closed = Period.objects.filter(status=Period.Status.CLOSED).order_by("-start").first()
    return {
        "billing": {
            "running": running,
            "due": due,
            "due_statements": period_statements(period=due).labelled() if due else [],
            "due_telemetry": telemetry_pending(start=due.start, end=due.end) if due else None,
            "last_closed": last_closed,
        }
    }


dashboard_panel_register(
    DashboardPanel(
        key="billing",
        order=30,
        template="admin/billing/dashboard_panel.html",
        permission="billing.view_period",
        context=billing_panel,
    )
)
