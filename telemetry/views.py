"""The agent API: enrolment and the batch endpoint. Validate, call one service, answer.

Plain Django views rather than DRF: the batch endpoint is machine-to-machine, authenticated by
its own signature, and its whole budget is a few milliseconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
import uuid
from typing import Any

import msgspec
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from telemetry.keys import node_key_derive, node_key_sha256, request_signature, signature_matches
from telemetry.schema import BodyTooLarge, SchemaError, batch_decode_gzip
from telemetry.selectors import node_credential_current
from telemetry.services.enrolment import EnrolmentRefused, node_enrol
from telemetry.services.ingest import Outcome, batch_receive

RETRY_AFTER_S = "5"
_STATUS = {
    Outcome.ACCEPTED: 202,
    Outcome.REPLAYED: 200,
    Outcome.IN_PROGRESS: 409,
    Outcome.CONFLICT: 422,
}


def problem(status: int, error: str, detail: str, *, field: str = "", **extra: Any) -> JsonResponse:
    """Errors are ``{"error", "detail", "field"}`` (plus context such as ``window``)."""
    response = JsonResponse(
        {"error": error, "detail": detail, "field": field, **extra}, status=status
    )
    if status in (409, 429, 503):
        response["Retry-After"] = "1" if status == 409 else RETRY_AFTER_S
    return response


def _unauthorized(detail: str) -> JsonResponse:
    return problem(401, "unauthorized", detail)


@csrf_exempt
@require_POST
def batches_receive(request: HttpRequest) -> JsonResponse:
    """``POST /api/v1/telemetry/batches`` — see docs/telemetry.md for the contract."""
    try:
        return _batches_receive(request)
    except (OperationalError, InterfaceError):
        return problem(503, "unavailable", "The database is unavailable; retry later.")


def _batches_receive(request: HttpRequest) -> JsonResponse:
    received_at = timezone.now()
    limit = settings.TELEMETRY_MAX_BODY_BYTES
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > limit:
        return problem(413, "too_large", f"The body must be at most {limit} bytes as sent.")
    try:
        node_id = uuid.UUID(request.headers.get("X-Steward-Node", ""))
        timestamp = int(request.headers.get("X-Steward-Timestamp", ""))
    except ValueError:
        return _unauthorized(
            "X-Steward-Node (a UUID) and X-Steward-Timestamp (unix seconds) are required."
        )
    signature = request.headers.get("X-Steward-Signature", "")
    key_header = request.headers.get("Idempotency-Key", "")
    tolerance = settings.TELEMETRY_SIGNATURE_TOLERANCE_S
    if abs(time.time() - timestamp) > tolerance:
        return _unauthorized(
            f"X-Steward-Timestamp is more than {tolerance} s from the server's clock."
        )
    body = request.body
    if len(body) > limit:
        return problem(413, "too_large", f"The body must be at most {limit} bytes as sent.")
    credential = node_credential_current(node_id=node_id)
    if credential is None:
        return _unauthorized("Unknown node, or its key was revoked: enrol again.")
    generation, key_sha256 = credential
    node_key = node_key_derive(node_id=node_id, generation=generation)
    body_sha256 = hashlib.sha256(body).hexdigest()
    expected = request_signature(
        node_key=node_key,
        method=request.method or "POST",
        path=request.path,
        timestamp=timestamp,
        batch_id=key_header,
        body_sha256=body_sha256,
    )
    # Both checks run whatever the first says, so timing tells nothing.
    key_current = signature_matches(node_key_sha256(node_key), key_sha256)
    if not (signature_matches(expected, signature) and key_current):
        return _unauthorized("The signature does not match.")
    try:
        batch_id = uuid.UUID(key_header)
    except ValueError:
        return problem(
            400, "bad_request", "Idempotency-Key must be the batch's UUID.", field="Idempotency-Key"
        )
    if request.headers.get("Content-Encoding", "").lower() != "gzip":
        return problem(
            415, "unsupported_media_type", "Send gzip(JSON) with Content-Encoding: gzip."
        )
    if request.content_type != "application/json":
        return problem(415, "unsupported_media_type", "Content-Type must be application/json.")
    try:
        batch = batch_decode_gzip(body, limit=settings.TELEMETRY_MAX_INFLATED_BYTES)
    except BodyTooLarge as exc:
        return problem(413, "too_large", str(exc))
    except SchemaError as exc:
        extra = {"window": exc.window} if exc.window else {}
        return problem(422, "invalid_batch", exc.detail, field=exc.field, **extra)
    if batch.batch_id != batch_id:
        return problem(
            422, "invalid_batch", "batch_id differs from the Idempotency-Key.", field="batch_id"
        )
    if batch.node_id is not None and batch.node_id != node_id:
        return problem(
            422, "invalid_batch", "node_id differs from X-Steward-Node.", field="node_id"
        )
    receipt = batch_receive(
        node_id=node_id,
        batch_id=batch_id,
        body=body,
        body_sha256=body_sha256,
        signed_at=dt.datetime.fromtimestamp(timestamp, dt.UTC),
        received_at=received_at,
        window_count=len(batch.windows),
        event_count=len(batch.events),
        schema=batch.SCHEMA,
    )
    if receipt.outcome is Outcome.IN_PROGRESS:
        return problem(409, "in_progress", "This Idempotency-Key is being stored; retry shortly.")
    if receipt.outcome is Outcome.CONFLICT:
        return problem(
            422,
            "idempotency_key_reused",
            "This Idempotency-Key was used before with a different body.",
            field="Idempotency-Key",
        )
    return JsonResponse(receipt.answer, status=_STATUS[receipt.outcome])


class _EnrolRequest(msgspec.Struct, frozen=True):
    bootstrap_token: str
    hostname: str
    gpus: list[dict[str, Any]] = []
    agent_version: str | None = None


_enrol_decoder = msgspec.json.Decoder(_EnrolRequest)


@csrf_exempt
@require_POST
def agents_enrol(request: HttpRequest) -> JsonResponse:
    """``POST /api/v1/agents/enrol``: a one-time bootstrap token for a node key."""
    if len(request.body) > 256 * 1024:
        return problem(413, "too_large", "The enrolment request is too large.")
    try:
        payload = _enrol_decoder.decode(request.body)
    except msgspec.ValidationError as exc:
        return problem(422, "invalid_request", str(exc))
    except msgspec.DecodeError as exc:
        return problem(400, "bad_request", f"The body is not valid JSON: {exc}.")
    try:
        enrolment = node_enrol(
            bootstrap_token=payload.bootstrap_token, hostname=payload.hostname, gpus=payload.gpus
        )
    except EnrolmentRefused as exc:
        return problem(403, "enrolment_refused", str(exc))
    except (OperationalError, InterfaceError):
        return problem(503, "unavailable", "The database is unavailable; retry later.")
    return JsonResponse({"node_id": enrolment.node_id, "node_key": enrolment.node_key}, status=201)
