"""The guided close: one console page per period that walks its close, step by step.

Each step's state comes from the checks the services run themselves (the close's start
checks, telemetry still on its way, the facts the drafts are computed from); what blocks a
step is named, with a link to where it is fixed; and its buttons call the same services as
the period's and statements' actions, with the operator's reason, under the same
permissions (``billing.close_period``, ``billing.publish_statement``) on the 2FA-verified
console.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from accounts.admin_site import utc
from accounts.admin_toolkit import all_or_none, error_text
from accounts.models import Owner, User
from billing.models import Period, Statement
from billing.selectors import close as close_selectors
from billing.selectors.close import period_statements
from billing.selectors.history import period_history
from billing.selectors.pending import telemetry_pending
from billing.services import closing, publishing

DONE, BLOCKED, TODO, CHECK, LATER = "done", "blocked", "todo", "check", "later"
STATE_LABELS = {
    DONE: "Done",
    BLOCKED: "Blocked",
    TODO: "To do",
    CHECK: "Check",
    LATER: "Not yet",
}
# Actions of the page: who may run them.
CLOSE_ACTIONS = {"start", "recompute", "recompute_owner", "finish"}
PUBLISH_ACTIONS = {"request", "approve"}


@dataclass
class Step:
    key: str
    title: str
    state: str = LATER
    notes: list[tuple[str, str, str]] = field(default_factory=list)  # (text, link, its text)
    action: tuple[str, str] | None = None  # (action, button label), if the operator may

    @property
    def state_label(self) -> str:
        return STATE_LABELS[self.state]

    def note(self, text: str, link: str = "", link_text: str = "Fix this") -> None:
        self.notes.append((text, link, link_text if link else ""))


def _admin_url(name: str, *args: Any, query: dict[str, Any] | None = None) -> str:
    url = reverse(f"admin:{name}", args=args)
    return f"{url}?{urlencode(query)}" if query else url


def close_steps(*, period: Period, user: Any, now: datetime) -> dict[str, Any]:
    """The page's steps and tables for ``period`` as ``user`` sees it at ``now``."""
    may_close = user.has_perm("billing.close_period")
    may_publish = user.has_perm("billing.publish_statement")
    is_open, closing_now = (
        period.status == Period.Status.OPEN,
        period.status == Period.Status.CLOSING,
    )
    tally = period_statements(period=period, requester=user)
    drafts = tally.of(Statement.Status.DRAFT)
    requested = tally.of(Statement.Status.PUBLISH_REQUESTED)
    published = tally.of(Statement.Status.PUBLISHED)
    total = drafts + requested + published
    statements_url = _admin_url(
        "billing_statement_changelist", query={"period__id__exact": period.pk}
    )

    telemetry = Step("telemetry", "Telemetry complete to the period's end")
    pending = telemetry_pending(start=period.start, end=period.end)
    if period.end > now:
        telemetry.state = BLOCKED
        telemetry.note(f"The period runs until {utc(period.end)}; it closes after it ends.")
    elif pending.any:
        telemetry.state = BLOCKED
        telemetry.note(
            f"Still on its way: {pending.describe()}. Closing and publishing wait for it.",
            _admin_url("telemetry_ingest_health"),
            "Ingest health",
        )
    else:
        telemetry.state = DONE
        telemetry.note(
            "No batch that may hold data for the period is pending or failed, and every "
            "GPU-hour's rollups are up to date."
        )

    cards = Step("rate_cards", "Rate cards cover the period")
    revenue = Step("revenue", "Revenue entered")
    inputs = close_selectors.close_inputs(period=period) if is_open or closing_now else None
    if inputs is None:
        cards.state = revenue.state = DONE
        cards.note("The period is closed: its statements were computed with the cards then.")
        revenue.note("The period is closed: corrections go into an open period.")
    else:
        _cards_step(cards, inputs, editable=is_open)
        _revenue_step(revenue, inputs, period=period, editable=is_open)

    refusals = closing.period_close_refusals(period=period) if is_open else {}
    start = Step("start", "Start the close")
    if not is_open:
        start.state = DONE
        start.note(f"Closing since {utc(period.closing_started_at)}.")
    elif refusals:
        start.state = BLOCKED
        for name, text in refusals.items():
            fix = _REFUSAL_FIXES.get(name)
            start.note(text, *((_admin_url(fix[0]), fix[1]) if fix else ()))
    elif BLOCKED in (cards.state, revenue.state):
        start.state = BLOCKED
        start.note(
            "The drafts cannot be computed until the steps above are fixed: the close would "
            "start, refuse the drafts and go back to open."
        )
    else:
        start.state = TODO
        start.note("Moves the period to closing and computes a draft statement per owner.")
        if may_close:
            start.action = ("start", "Start the close: compute the drafts")

    computed = Step("drafts", "Drafts computed")
    last = tally.last_computed
    if is_open:
        computed.note("Computed when the close starts.")
    else:
        computed.state = DONE
        computed.note(
            f"{total} statement(s), last computed {utc(last)}: {drafts} draft, "
            f"{requested} publish requested, {published} published.",
            statements_url,
            "Statements of this period",
        )
        if closing_now and may_close:
            computed.note(
                "Recompute after correcting an input: a changed draft goes back to draft and "
                "needs a fresh request."
            )
            computed.action = ("recompute", "Recompute the drafts")

    previous = close_selectors.previous_period(period=period)
    changes = close_selectors.owner_changes(period=period, previous=previous) if total else []
    compared = Step("changes", "Change against the previous period, per owner")
    if total:
        compared.state = DONE if published == total else CHECK
        compared.note(
            "Each owner's net (GPU lines plus adjustments) against "
            + (f"{previous}." if previous is not None else "no earlier period.")
        )
        if closing_now and may_close:
            compared.note(
                "After correcting one owner's holdings or account, recompute that owner's "
                "drafts (with those of anyone a GPU changed hands with): each pool stays "
                "split as the last whole run split it."
            )
    else:
        compared.note("Shown once the drafts are computed.")

    request = Step("request", "Request publishing")
    approve = Step("approve", "Approve publishing (a second operator)")
    mine = tally.requested_by_requester
    if closing_now and drafts:
        request.state = TODO
        request.note(f"{drafts} draft(s) to request.", statements_url, "Review them")
        if may_publish:
            request.action = ("request", f"Request publishing of {drafts} draft(s)")
    elif total and not drafts:
        request.state = DONE
        request.note("Every statement is requested or published.")
    else:
        request.note("Once the drafts are computed.")
    if closing_now and requested:
        approve.state = TODO
        approve.note(
            f"{requested} statement(s) requested, waiting for approval.",
            statements_url,
            "Review them",
        )
        if mine:
            approve.note(
                f"You requested {mine} of them: another operator must approve those (four eyes)."
            )
        if may_publish and requested > mine:
            approve.action = ("approve", f"Approve {requested - mine} requested statement(s)")
    elif total and published == total:
        approve.state = DONE
        approve.note(f"All {published} statement(s) published.")
    else:
        approve.note("Once publishing is requested.")

    finish = Step("finish", "Finish the close")
    if period.status == Period.Status.CLOSED:
        finish.state = DONE
        finish.note(f"Closed {utc(period.closed_at)}.")
    elif closing_now and published == total:
        finish.state = TODO
        finish.note("Every statement is published: the period can be closed.")
        if may_close:
            finish.action = ("finish", "Finish the close")
    else:
        finish.note("Once every statement is published.")

    steps = [telemetry, cards, revenue, start, computed, compared, request, approve, finish]
    return {
        "steps": steps,
        "inputs": inputs,
        "changes": changes,
        # One owner's drafts recomputed from the table (``owner_statements_recompute``).
        "may_redraft": closing_now and may_close,
        "previous": previous,
        "history": period_history(period=period),
    }


def _cards_step(step: Step, inputs: close_selectors.CloseInputs, *, editable: bool) -> None:
    refusing = [g for g in inputs.gaps if g.in_service]
    for gap in inputs.gaps:
        text = (
            f"No {gap.currency} rate card for cluster {gap.cluster} from {utc(gap.start)} to "
            f"{utc(gap.end)}"
            + (
                ", while a GPU was in service there: the close refuses the period."
                if gap.in_service
                else "; no GPU was in service then, so nothing is charged."
            )
        )
        link = (
            _admin_url(
                "billing_ratecard_add",
                query={"cluster": gap.cluster.pk, "currency": gap.currency},
            )
            if editable and gap.in_service
            else ""
        )
        step.note(text, link, "Add a rate card")
    if refusing:
        step.state = BLOCKED
    else:
        step.state = DONE
        if not inputs.gaps:
            step.note("Every cluster has a rate card in its owners' currencies all period.")


def _revenue_step(
    step: Step, inputs: close_selectors.CloseInputs, *, period: Period, editable: bool
) -> None:
    refused = [r for r in inputs.revenue if r.refused]
    missing = [r for r in inputs.revenue if not r.entered and not r.refused]
    for row in refused:
        step.note(
            row.refused,
            _admin_url("billing_poolrevenue_changelist") if editable else "",
            "Pool amounts",
        )
    for row in missing:
        step.note(
            f"Nothing entered for cluster {row.cluster}: no rental in the period and no pool "
            "amount (revenue can be zero; enter it if it is not).",
            _admin_url(
                "billing_poolrevenue_add", query={"cluster": row.cluster.pk, "period": period.pk}
            )
            if editable
            else "",
            "Enter a pool amount",
        )
    step.state = BLOCKED if refused else CHECK if missing else DONE


# Where a refusal of the close's start is fixed: (admin URL name, link text).
_REFUSAL_FIXES = {
    "telemetry": ("telemetry_ingest_health", "Ingest health"),
    "order": ("billing_period_changelist", "Periods"),
}


def close_action(
    admin_: ModelAdmin[Period], request: HttpRequest, period: Period, action: str, reason: str
) -> None:
    """Runs one step's action through its service; messages say what happened."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    if action in CLOSE_ACTIONS and not user.has_perm("billing.close_period"):
        raise PermissionDenied
    if action in PUBLISH_ACTIONS and not user.has_perm("billing.publish_statement"):
        raise PermissionDenied
    if action not in CLOSE_ACTIONS | PUBLISH_ACTIONS:
        raise PermissionDenied
    statements = Statement.objects.filter(period=period).select_related("owner", "period")
    drafts = statements.filter(status=Statement.Status.DRAFT).order_by("pk")
    # Those another operator requested: the four-eyes rule leaves the rest to someone else.
    asked = (
        statements.filter(status=Statement.Status.PUBLISH_REQUESTED)
        .exclude(requested_by=user)
        .order_by("pk")
    )
    if (action == "request" and not drafts.exists()) or (
        action == "approve" and not asked.exists()
    ):
        admin_.message_user(
            request,
            "No draft waits for a request."
            if action == "request"
            else "No statement waits for your approval: those you requested need another operator.",
            messages.WARNING,
        )
        return
    try:
        if action == "start":
            run = closing.period_close(period=period, by=user, reason=reason)
            done = f"The close started: {run.written} draft(s) computed."
        elif action == "recompute":
            run = closing.period_close_run(period=period, by=user, reason=reason)
            done = f"Recomputed: {run.written} draft(s) written, {run.unchanged} unchanged."
        elif action == "recompute_owner":
            owner = _owner_of(statements, request.POST.get("owner", ""))
            run = closing.owner_statements_recompute(
                period=period, owner=owner, by=user, reason=reason
            )
            done = (
                f"Recomputed the drafts of {owner}: {run.written} written, "
                f"{run.unchanged} unchanged."
            )
        elif action == "finish":
            closing.period_close_finish(period=period, by=user, reason=reason)
            done = f"{period} is closed."
        elif action == "request":
            n = all_or_none(
                drafts,
                lambda s: publishing.statement_publish_request(statement=s, by=user, reason=reason),
            )
            done = f"Publishing requested for {n} statement(s)."
        else:
            n = all_or_none(
                asked,
                lambda s: publishing.statement_publish_approve(statement=s, by=user, reason=reason),
            )
            done = f"{n} statement(s) published."
    except ValidationError as error:
        # Requests and approvals are all or none; a close step says itself what it left.
        undone = " Nothing was changed." if action in PUBLISH_ACTIONS else ""
        admin_.message_user(request, error_text(error) + undone, messages.ERROR)
    else:
        admin_.message_user(request, done, messages.SUCCESS)


def _owner_of(statements: QuerySet[Statement], owner_id: str) -> Owner:
    """The owner of one of the period's statements, by id; a refusal for anything else."""
    try:
        found = statements.filter(owner_id=uuid.UUID(owner_id)).first()
    except ValueError:
        found = None
    if found is None:
        raise ValidationError({"owner": "Choose an owner with a statement in this period."})
    return found.owner


def close_view(admin_: ModelAdmin[Period], request: HttpRequest, object_id: str) -> HttpResponse:
    period = admin_.get_object(request, object_id)
    if period is None or not admin_.has_view_permission(request, period):
        raise PermissionDenied
    url = reverse("admin:billing_period_close", args=[period.pk])
    if request.method == "POST":
        close_action(
            admin_,
            request,
            period,
            request.POST.get("action", ""),
            request.POST.get("reason", "").strip(),
        )
        return HttpResponseRedirect(url)
    context = {
        **admin_.admin_site.each_context(request),
        "title": f"Close of {period}",
        "opts": admin_.opts,
        "period": period,
        "original": period,
        **close_steps(period=period, user=request.user, now=timezone.now()),
    }
    return TemplateResponse(request, "admin/billing/period/close.html", context)
