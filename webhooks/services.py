"""Webhook endpoints (made, changed, rotated, removed), dispatch, delivery and replay.

Deliveries are claimed by compare-and-set (a due ``pending`` row, or a ``sending`` row whose
lease ran out because its worker died), the request is made outside any transaction, and its
outcome is written by compare-and-set on the claim, so two workers never both send an attempt.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Partner, PartnerGrant, User
from accounts.services import AuditEvent, audit_log
from core.instants import iso_z
from core.locks import lock, lock_one
from webhooks import guard, sender, signing
from webhooks.models import (
    EventType,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
    scope_for,
)

# Upper bounds of the delay before retry n (1-based); the last repeats until the window ends.
# Each delay is drawn uniformly below its bound (full jitter).
RETRY_SCHEDULE_S = (5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600)
# A claimed delivery whose worker died is taken again after this long.
LEASE_S = 120
# Retries due sooner than this are queued with a countdown; later ones wait for the sweep.
COUNTDOWN_MAX_S = 60
DESCRIPTION_MAX = 200


# --- endpoints ------------------------------------------------------------------------------


def _url_clean(url: str) -> str:
    url = (url or "").strip()
    if not url:
        raise ValidationError({"url": "Give the URL that receives the webhooks."})
    if len(url) > 2000:
        raise ValidationError({"url": "The URL is longer than 2,000 characters."})
    try:
        guard.url_check(url)
    except guard.UnsafeUrl as error:
        raise ValidationError({"url": str(error)}) from error
    return url


def _event_types_clean(event_types: Sequence[str]) -> list[str]:
    if isinstance(event_types, str) or not event_types:
        raise ValidationError(
            {"event_types": f"Choose one or more of {', '.join(EventType.values)}."}
        )
    unknown = sorted(set(event_types) - set(EventType.values))
    if unknown:
        raise ValidationError(
            {
                "event_types": f"Unknown event type {', '.join(unknown)}; choose among "
                f"{', '.join(EventType.values)}."
            }
        )
    return sorted(set(event_types))


def _description_clean(description: str) -> str:
    description = (description or "").strip()
    if len(description) > DESCRIPTION_MAX:
        raise ValidationError(
            {"description": f"At most {DESCRIPTION_MAX} characters ({len(description)} given)."}
        )
    return description


def _snapshot(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {
        "partner": str(endpoint.partner_id),
        "url": endpoint.url,
        "event_types": list(endpoint.event_types),
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "secret_generation": endpoint.secret_generation,
    }


@dataclass(frozen=True)
class EndpointWithSecret:
    endpoint: WebhookEndpoint
    secret: str  # shown once


@transaction.atomic
def endpoint_create(
    *,
    partner: Partner,
    url: str,
    event_types: Sequence[str],
    by: User | None,
    description: str = "",
    enabled: bool = True,
) -> EndpointWithSecret:
    """Registers a partner's endpoint; the answer carries its ``whsec_`` secret, shown once."""
    now = timezone.now()
    endpoint = WebhookEndpoint.objects.create(
        partner=partner,
        url=_url_clean(url),
        event_types=_event_types_clean(event_types),
        description=_description_clean(description),
        enabled=enabled,
        created_by=by,
        created_at=now,
        updated_at=now,
    )
    audit_log(
        actor=by,
        events=[AuditEvent.of(endpoint, action="webhook.create", after=_snapshot(endpoint))],
    )
    secret = signing.secret_for(endpoint_id=endpoint.pk, generation=endpoint.secret_generation)
    return EndpointWithSecret(endpoint, secret)


_UNSET: Any = object()


@transaction.atomic
def endpoint_update(
    *,
    endpoint: WebhookEndpoint,
    by: User | None,
    url: str = _UNSET,
    event_types: Sequence[str] = _UNSET,
    description: str = _UNSET,
    enabled: bool = _UNSET,
) -> WebhookEndpoint:
    """Changes what is given; enabling clears the reason it was disabled."""
    endpoint = lock_one(WebhookEndpoint.objects.filter(pk=endpoint.pk))
    before = _snapshot(endpoint)
    if url is not _UNSET:
        endpoint.url = _url_clean(url)
    if event_types is not _UNSET:
        endpoint.event_types = _event_types_clean(event_types)
    if description is not _UNSET:
        endpoint.description = _description_clean(description)
    if enabled is not _UNSET and bool(enabled) != endpoint.enabled:
        endpoint.enabled = bool(enabled)
        endpoint.disabled_at = None if endpoint.enabled else timezone.now()
        endpoint.disabled_reason = "" if endpoint.enabled else "disabled by the partner"
    endpoint.updated_at = timezone.now()
    endpoint.save()
    after = _snapshot(endpoint)
    if after != before:
        audit_log(
            actor=by,
            events=[AuditEvent.of(endpoint, action="webhook.update", before=before, after=after)],
        )
    return endpoint


@transaction.atomic
def endpoint_rotate_secret(*, endpoint: WebhookEndpoint, by: User | None) -> EndpointWithSecret:
    """A new secret, shown once; the previous one keeps signing (a second signature) for
    ``WEBHOOK_ROTATION_GRACE_S``, so receivers can switch without losing a message."""
    endpoint = lock_one(WebhookEndpoint.objects.filter(pk=endpoint.pk))
    now = timezone.now()
    endpoint.secret_generation += 1
    endpoint.previous_secret_valid_until = now + dt.timedelta(
        seconds=settings.WEBHOOK_ROTATION_GRACE_S
    )
    endpoint.updated_at = now
    endpoint.save(update_fields=["secret_generation", "previous_secret_valid_until", "updated_at"])
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(
                endpoint,
                action="webhook.rotate_secret",
                after={
                    "secret_generation": endpoint.secret_generation,
                    "previous_secret_valid_until": endpoint.previous_secret_valid_until,
                },
            )
        ],
    )
    secret = signing.secret_for(endpoint_id=endpoint.pk, generation=endpoint.secret_generation)
    return EndpointWithSecret(endpoint, secret)


@transaction.atomic
def endpoint_delete(*, endpoint: WebhookEndpoint, by: User | None) -> None:
    """Removes the endpoint and its delivery log; nothing more is sent to it."""
    endpoint = lock_one(WebhookEndpoint.objects.filter(pk=endpoint.pk))
    audit_log(
        actor=by,
        events=[AuditEvent.of(endpoint, action="webhook.delete", before=_snapshot(endpoint))],
    )
    WebhookAttempt.objects.filter(delivery__endpoint=endpoint).delete()
    WebhookDelivery.objects.filter(endpoint=endpoint).delete()
    endpoint.delete()


# --- dispatch: events into deliveries ---------------------------------------------------------

# Claimed events × enabled endpoints that want the type and whose partner has a live grant, with
# the event's scope, of one of the event's owners. Grants are checked again at every attempt.
_DISPATCH = """
WITH claimed AS (
    SELECT id, type, owner_ids FROM webhooks_webhookevent
     WHERE dispatched_at IS NULL
     ORDER BY created_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE webhooks_webhookevent e SET dispatched_at = %(now)s
      FROM claimed c WHERE e.id = c.id
    RETURNING e.id
), inserted AS (
    INSERT INTO webhooks_webhookdelivery
        (id, event_id, endpoint_id, status, attempts, next_attempt_at, last_error, created_at)
    SELECT gen_random_uuid(), c.id, ep.id, 'pending', 0, %(now)s, '', %(now)s
      FROM claimed c
      JOIN webhooks_webhookendpoint ep ON ep.enabled AND c.type = ANY(ep.event_types)
     WHERE EXISTS (
            SELECT 1 FROM accounts_partnergrant g
             WHERE g.partner_id = ep.partner_id AND g.revoked_at IS NULL
               AND g.owner_id = ANY(c.owner_ids)
               AND g.scopes @> ARRAY[CASE WHEN c.type = 'statement.published'
                                          THEN 'statements:read' ELSE 'fleet:read' END]::varchar[])
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT (SELECT count(*) FROM marked), (SELECT coalesce(array_agg(id), '{}') FROM inserted)
"""


@dataclass(frozen=True)
class DispatchResult:
    events: int
    deliveries: list[uuid.UUID]


def events_dispatch(*, limit: int) -> DispatchResult:
    """Turns up to ``limit`` undispatched events into deliveries (one transaction); the
    deliveries are queued once it commits."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_DISPATCH, {"limit": limit, "now": timezone.now()})
        row = cursor.fetchone()
        claimed, ids = (int(row[0]), list(row[1])) if row else (0, [])
        if ids:
            transaction.on_commit(lambda: _queue(ids))
    return DispatchResult(events=claimed, deliveries=ids)


def _queue(ids: Sequence[uuid.UUID], countdown: float = 0.0) -> None:
    from webhooks.tasks import delivery_send

    for delivery_id in ids:
        delivery_send.apply_async(args=(str(delivery_id),), countdown=countdown)


# --- delivery -------------------------------------------------------------------------------


def retry_delay(*, retry: int, rng: random.Random | None = None) -> dt.timedelta:
    """The wait before retry ``retry`` (1 = the first retry): uniform in [0, bound) with the
    bound from ``RETRY_SCHEDULE_S`` (full jitter), in whole milliseconds."""
    bound = RETRY_SCHEDULE_S[min(retry, len(RETRY_SCHEDULE_S)) - 1]
    draw = (rng or random.SystemRandom()).random()
    return dt.timedelta(milliseconds=int(draw * bound * 1000))


def granted_owner_ids(*, partner_id: Any, event: WebhookEvent) -> list[uuid.UUID]:
    """The event's owners this partner may hear about now (a live grant with the scope)."""
    ids = PartnerGrant.objects.filter(
        partner_id=partner_id,
        revoked_at__isnull=True,
        owner_id__in=event.owner_ids,
        scopes__contains=[scope_for(event.type)],
    ).values_list("owner_id", flat=True)
    return sorted(set(ids), key=str)


def payload(*, event: WebhookEvent, owner_ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    """The body for a partner granted ``owner_ids``: other owners never appear in it."""
    owners = [
        {"owner_id": str(owner_id), **event.owner_data.get(str(owner_id), {})}
        for owner_id in owner_ids
    ]
    return {
        "type": event.type,
        "timestamp": iso_z(event.created_at),
        "data": {**event.data, "owners": owners},
    }


def _claim(delivery_id: uuid.UUID, now: dt.datetime) -> bool:
    due = Q(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now) | Q(
        status=WebhookDelivery.Status.SENDING, lease_until__lt=now
    )
    return (
        WebhookDelivery.objects.filter(due, pk=delivery_id).update(
            status=WebhookDelivery.Status.SENDING, lease_until=now + dt.timedelta(seconds=LEASE_S)
        )
        == 1
    )


def _close(delivery: WebhookDelivery, *, status: str, reason: str, now: dt.datetime) -> None:
    WebhookDelivery.objects.filter(pk=delivery.pk, status=WebhookDelivery.Status.SENDING).update(
        status=status, last_error=reason[:500], completed_at=now, next_attempt_at=None
    )


def _disable(endpoint_id: Any, *, reason: str, now: dt.datetime) -> None:
    WebhookEndpoint.objects.filter(pk=endpoint_id, enabled=True).update(
        enabled=False, disabled_reason=reason[:200], disabled_at=now, updated_at=now
    )


@dataclass(frozen=True)
class AttemptResult:
    status: str  # the delivery's status afterwards; "" when it was not claimed
    status_code: int | None = None
    next_attempt_at: dt.datetime | None = None


def delivery_attempt(*, delivery_id: uuid.UUID, rng: random.Random | None = None) -> AttemptResult:
    """Sends one attempt of a due delivery and records it; does nothing if the delivery is not
    due or another worker holds it."""
    now = timezone.now()
    if not _claim(delivery_id, now):
        return AttemptResult(status="")
    delivery = WebhookDelivery.objects.select_related("event", "endpoint").get(pk=delivery_id)
    endpoint, event = delivery.endpoint, delivery.event
    cancelled = WebhookDelivery.Status.CANCELLED
    if not endpoint.enabled:
        _close(delivery, status=cancelled, reason="The endpoint is disabled.", now=now)
        return AttemptResult(status=cancelled)
    if event.type not in endpoint.event_types:
        _close(delivery, status=cancelled, reason="The endpoint no longer wants it.", now=now)
        return AttemptResult(status=cancelled)
    owner_ids = granted_owner_ids(partner_id=endpoint.partner_id, event=event)
    if not owner_ids:
        reason = f"No live grant with {scope_for(event.type)} of an owner it concerns."
        _close(delivery, status=cancelled, reason=reason, now=now)
        return AttemptResult(status=cancelled)

    body = json.dumps(payload(event=event, owner_ids=owner_ids), separators=(",", ":")).encode()
    number = delivery.attempts + 1
    try:
        target = guard.url_check(endpoint.url)
    except guard.UnsafeUrl as error:
        outcome = sender.Outcome(None, 0, "", f"Refused: {error}")
    else:
        headers = signing.headers_for(
            endpoint_id=endpoint.pk,
            generations=signing.generations_signing(
                generation=endpoint.secret_generation,
                previous_valid_until=endpoint.previous_secret_valid_until,
                at=now,
            ),
            message_id=event.message_id,
            timestamp=int(now.timestamp()),
            body=body,
        )
        outcome = sender.post(
            target=target,
            body=body,
            headers=headers,
            timeout_s=settings.WEBHOOK_TIMEOUT_S,
            max_bytes=settings.WEBHOOK_RESPONSE_MAX_BYTES,
        )
    return _record(delivery, number=number, started=now, outcome=outcome, rng=rng)


@transaction.atomic
def _record(
    delivery: WebhookDelivery,
    *,
    number: int,
    started: dt.datetime,
    outcome: sender.Outcome,
    rng: random.Random | None,
) -> AttemptResult:
    now = timezone.now()
    Status = WebhookDelivery.Status
    if not lock(WebhookDelivery.objects.filter(pk=delivery.pk)):
        return AttemptResult(status="")  # its endpoint was deleted meanwhile
    WebhookAttempt.objects.create(
        delivery=delivery,
        number=number,
        started_at=started,
        duration_ms=outcome.duration_ms,
        status_code=outcome.status_code,
        response_excerpt=outcome.response_excerpt,
        error=outcome.error,
    )
    first = delivery.first_attempt_at or started
    code = outcome.status_code
    fields: dict[str, Any] = {
        "attempts": number,
        "first_attempt_at": first,
        "last_status_code": code,
        "last_error": outcome.error or ("" if code is None else f"HTTP {code}"),
        "lease_until": None,
    }
    next_at = None
    if code is not None and 200 <= code < 300:
        fields.update(
            status=Status.SUCCEEDED, completed_at=now, next_attempt_at=None, last_error=""
        )
        WebhookEndpoint.objects.filter(pk=delivery.endpoint_id).update(last_success_at=now)
    elif code == 410:
        fields.update(status=Status.FAILED, completed_at=now, next_attempt_at=None)
        _disable(delivery.endpoint_id, reason="The endpoint answered 410 Gone.", now=now)
    else:
        deadline = first + dt.timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_S)
        if now >= deadline:
            fields.update(status=Status.FAILED, completed_at=now, next_attempt_at=None)
            succeeded_since = WebhookEndpoint.objects.filter(
                pk=delivery.endpoint_id, last_success_at__gte=first
            ).exists()
            if not succeeded_since:
                days = settings.WEBHOOK_RETRY_WINDOW_S / 86_400
                _disable(
                    delivery.endpoint_id,
                    reason=f"Every delivery failed for {days:g} days.",
                    now=now,
                )
        else:
            next_at = min(now + retry_delay(retry=number, rng=rng), deadline)
            fields.update(status=Status.PENDING, next_attempt_at=next_at)
    WebhookDelivery.objects.filter(
        pk=delivery.pk, status=Status.SENDING, attempts=number - 1
    ).update(**fields)
    if next_at is not None and (next_at - now).total_seconds() <= COUNTDOWN_MAX_S:
        wait = max((next_at - now).total_seconds(), 0.0)
        transaction.on_commit(lambda: _queue([delivery.pk], countdown=wait))
    return AttemptResult(status=fields["status"], status_code=code, next_attempt_at=next_at)


def deliveries_due(*, now: dt.datetime, limit: int = 1000) -> list[uuid.UUID]:
    """Deliveries whose attempt is due (or whose worker died holding them): the sweep's list."""
    due = Q(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now) | Q(
        status=WebhookDelivery.Status.SENDING, lease_until__lt=now
    )
    return list(
        WebhookDelivery.objects.filter(due)
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )


def events_waiting(*, now: dt.datetime, older_than: dt.timedelta) -> int:
    return WebhookEvent.objects.filter(
        dispatched_at__isnull=True, created_at__lt=now - older_than
    ).count()


@dataclass(frozen=True)
class PruneResult:
    events: int
    deliveries: int
    attempts: int


_PRUNE_SQL = """
WITH doomed AS (
    SELECT e.id FROM webhooks_webhookevent e
    WHERE e.created_at < %(before)s
      AND e.dispatched_at IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM webhooks_webhookdelivery d
          WHERE d.event_id = e.id AND d.status IN ('pending', 'sending')
      )
    ORDER BY e.created_at
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED
), deliveries AS (
    DELETE FROM webhooks_webhookdelivery d USING doomed
    WHERE d.event_id = doomed.id
    RETURNING d.id
), attempts AS (
    DELETE FROM webhooks_webhookattempt a USING deliveries
    WHERE a.delivery_id = deliveries.id
    RETURNING 1
), events AS (
    DELETE FROM webhooks_webhookevent e USING doomed
    WHERE e.id = doomed.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM deliveries),
       (SELECT count(*) FROM attempts)
"""


def events_prune(*, now: dt.datetime, keep: dt.timedelta, limit: int) -> PruneResult:
    """Deletes up to ``limit`` of the oldest events created before ``now - keep``, with their
    deliveries and attempt logs, in one statement. An event that any endpoint is still being
    sent (a delivery pending or sending) is kept whatever its age, and so is one not yet
    dispatched: retention never cuts a delivery short. Rows locked by a dispatch or a replay
    are skipped and taken on a later pass."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_PRUNE_SQL, {"before": now - keep, "limit": limit})
        events, deliveries, attempts = cursor.fetchone()
    return PruneResult(events=events, deliveries=deliveries, attempts=attempts)


def deliveries_queue(*, ids: Sequence[uuid.UUID]) -> None:
    _queue(ids)


@transaction.atomic
def delivery_replay(*, delivery: WebhookDelivery, by: User | None) -> WebhookDelivery:
    """Sends the event to the endpoint again, as a new delivery (same ``webhook-id``, so a
    receiver that already processed it can tell)."""
    endpoint = lock_one(WebhookEndpoint.objects.filter(pk=delivery.endpoint_id))
    if not endpoint.enabled:
        raise ValidationError({"endpoint": "The endpoint is disabled; enable it, then replay."})
    event = WebhookEvent.objects.get(pk=delivery.event_id)
    if not granted_owner_ids(partner_id=endpoint.partner_id, event=event):
        raise ValidationError(
            {"delivery": f"No live grant with {scope_for(event.type)} covers this event now."}
        )
    now = timezone.now()
    replay = WebhookDelivery.objects.create(
        event=event,
        endpoint=endpoint,
        replay_of=delivery,
        replayed_by=by,
        next_attempt_at=now,
        created_at=now,
    )
    audit_log(
        actor=by,
        events=[
            AuditEvent.of(replay, action="webhook.replay", after={"replay_of": str(delivery.pk)})
        ],
    )
    transaction.on_commit(lambda: _queue([replay.pk]))
    return replay
