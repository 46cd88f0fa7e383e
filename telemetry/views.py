"""The agent API: enrolment and the batch endpoint. Validate, call one service, answer.

Plain Django views rather than DRF: the batch endpoint is machine-to-machine, authenticated by
its own signature, and its whole budget is a few milliseconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
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

from telemetry.jsonguard import (
    JsonRefused,
    depth_check,
    duplicate_key_check,
    stored_value_check,
    text_check,
    utf8_check,
)
from telemetry.keys import node_key_derive, node_key_sha256, request_signature, signature_matches
from telemetry.schema import (
    ENROL_MAX_BODY_BYTES,
    ENROL_MAX_TEXT,
    BodyTooLarge,
    SchemaError,
    batch_decode_gzip,
    enrol_decode,
    enrol_token_read,
    json_error,
)
from telemetry.selectors import node_credential_current
from telemetry.services.enrolment import EnrolmentRefused, bootstrap_token_check, node_enrol
from telemetry.services.ingest import Outcome, batch_receive

log = logging.getLogger(__name__)

RETRY_AFTER_S = "5"
_STATUS = {
    Outcome.ACCEPTED: 202,
    Outcome.REPLAYED: 200,
    Outcome.IN_PROGRESS: 409,
    Outcome.CONFLICT: 422,
}


def problem(status: int, error: str, detail: str, *, field: str = "", **extra: Any) -> JsonResponse:
    """Errors are ``{"error", "detail", "field"}`` (plus context such as ``window``)."""
    answer = {"error": error, "detail": detail, "field": field, **extra}
    response = JsonResponse(_text_valid(answer), status=status)
    if status in (409, 429, 503):
        response["Retry-After"] = "1" if status == 409 else RETRY_AFTER_S
    return response


def _text_valid(value: Any) -> Any:
    """An answer's texts as valid Unicode: a field or window named from a body that is not
    UTF-8 (or holds half a surrogate pair) carries lone surrogates, which a strict JSON
    reader refuses in the answer itself. A byte that was not UTF-8 is written ``\\xff``,
    half a surrogate pair ``\\ud800``: the text as the body had it."""
    if isinstance(value, dict):
        return {_text_valid(k): _text_valid(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_text_valid(v) for v in value]
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:  # bytes the lenient reading kept as surrogates (U+DC80–U+DCFF)
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate the body escaped as \uXXXX
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _unauthorized(detail: str) -> JsonResponse:
    return problem(401, "unauthorized", detail)


# Answers that refuse a signed batch for good: the agent dead-letters it, so the operator is
# told too (a 401 is the request log line's; a 409 is retried).
_REFUSED = frozenset({400, 413, 415, 422})


@csrf_exempt
@require_POST
def batches_receive(request: HttpRequest) -> JsonResponse:
    """``POST /api/v1/telemetry/batches`` — see docs/telemetry.md for the contract."""
    try:
        response = _batches_receive(request)
    except (OperationalError, InterfaceError):
        return problem(503, "unavailable", "The database is unavailable; retry later.")
    if response.status_code in _REFUSED:
        answer = json.loads(response.content)
        batch_id = request.headers.get("Idempotency-Key", "")[:64]
        node_id = request.headers.get("X-Steward-Node", "")[:64]
        log.warning(
            "batch %s of node %s refused (%d %s): %s",
            batch_id,
            node_id,
            response.status_code,
            answer["error"],
            answer["detail"][:500],
            extra={"batch_id": batch_id, "node_id": node_id, "field": answer["field"][:200]},
        )
    return response


def _batches_receive(request: HttpRequest) -> JsonResponse:
    received_at = timezone.now()
    limit = settings.TELEMETRY_MAX_BODY_BYTES
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > limit:
        return problem(413, "too_large", f"The body must be at most {limit} bytes as sent.")
    try:
        node_id = uuid.UUID(request.headers.get("X-Steward-Node", ""))
        signed_at = request.headers.get("X-Steward-Timestamp", "")
        # ASCII digits, and few: int() also reads other scripts' digits, and an int of 400
        # digits overflows the float it is compared with.
        if not (signed_at.isascii() and signed_at.isdigit() and len(signed_at) <= 12):
            raise ValueError(signed_at)
        timestamp = int(signed_at)
    except ValueError:
        return _unauthorized(
            "X-Steward-Node (a UUID) and X-Steward-Timestamp (unix seconds) are required."
        )
    signature = request.headers.get("X-Steward-Signature", "")
    key_header = request.headers.get("Idempotency-Key", "")
    tolerance = settings.TELEMETRY_SIGNATURE_TOLERANCE_S
    if abs(int(time.time()) - timestamp) > tolerance:  # whole seconds: ±300 both pass
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
        if not key_header:
            return _unauthorized(
                "The signature does not match; the Idempotency-Key header it covers is missing."
            )
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
        batch=batch,
        body_sha256=body_sha256,
        signed_at=dt.datetime.fromtimestamp(timestamp, dt.UTC),
        received_at=received_at,
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


@csrf_exempt
@require_POST
def agents_enrol(request: HttpRequest) -> JsonResponse:
    """``POST /api/v1/agents/enrol``: a one-time bootstrap token for a node key.

    The token is checked before the request is decoded: until then the body is only measured
    (size, nesting, without recursion) and its token read, every other value skipped."""
    try:
        return _agents_enrol(request)
    except (OperationalError, InterfaceError):
        return problem(503, "unavailable", "The database is unavailable; retry later.")


def _agents_enrol(request: HttpRequest) -> JsonResponse:
    body = request.body
    if len(body) > ENROL_MAX_BODY_BYTES:
        return problem(
            413, "too_large", f"The enrolment request must be at most {ENROL_MAX_BODY_BYTES} bytes."
        )
    try:
        depth_check(body)
    except JsonRefused as exc:
        return problem(400, "bad_request", exc.detail)
    try:
        token = enrol_token_read(body)
    except msgspec.ValidationError as exc:
        field = "bootstrap_token" if "bootstrap_token" in str(exc) else ""
        return problem(422, "invalid_request", str(exc), field=field)
    except msgspec.DecodeError as exc:
        return problem(400, "bad_request", f"The body is not valid JSON: {exc}.")
    except UnicodeDecodeError:
        return problem(
            400, "bad_request", "bootstrap_token is not valid UTF-8.", field="bootstrap_token"
        )
    try:
        if not token.isascii():  # tokens are URL-safe base64 (and the hash needs text)
            raise EnrolmentRefused("The bootstrap token is unknown, used or expired.")
        bootstrap_token_check(bootstrap_token=token)
    except EnrolmentRefused as exc:
        return problem(403, "enrolment_refused", str(exc))
    try:
        utf8_check(body)
    except JsonRefused as exc:
        return problem(400, "bad_request", exc.detail, field=exc.field)
    try:
        payload = enrol_decode(body)
        duplicate_key_check(body)
        found = text_check(body)  # in any text or key, as a batch
        if found is not None:
            raise JsonRefused(found[1], field=found[0])
        stored_value_check(payload.gpus, path="gpus", max_text=ENROL_MAX_TEXT)
    except JsonRefused as exc:
        return problem(422, "invalid_request", exc.detail, field=exc.field)
    except msgspec.MsgspecError as exc:
        error = json_error(exc, body)
        if isinstance(exc, msgspec.DecodeError) and not error.field:
            return problem(400, "bad_request", error.detail)
        return problem(422, "invalid_request", error.detail, field=error.field)
    try:
        enrolment = node_enrol(
            bootstrap_token=payload.bootstrap_token, hostname=payload.hostname, gpus=payload.gpus
        )
    except EnrolmentRefused as exc:
        return problem(403, "enrolment_refused", str(exc))
    return JsonResponse({"node_id": enrolment.node_id, "node_key": enrolment.node_key}, status=201)
