"""The partner API: read-only views over ``api.access``. Each view validates its query,
asks ``api.access`` for what the caller may see, and serializes it."""

from __future__ import annotations

import functools
import hashlib
import json
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.filters import BaseFilterBackend, OrderingFilter
from rest_framework.generics import GenericAPIView, ListAPIView, RetrieveAPIView
from rest_framework.mixins import ListModelMixin
from rest_framework.pagination import BasePagination
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from accounts.models import ApiScope
from accounts.selectors import disclosure_texts_published
from api import access
from api.access import Caller
from api.authentication import ApiKeyAuthentication
from api.exceptions import problem_exception_handler
from api.pagination import ApiCursorPagination, ApiOrderingFilter
from api.permissions import AnyScope, FleetRead, StatementsRead, TelemetryRead
from api.selectors import STEPS, month_points, month_starts, series_parts
from api.serializers import (
    EventFilterSerializer,
    GpuFilterSerializer,
    GpuSerializer,
    IncidentSerializer,
    MaintenanceSerializer,
    OwnerSerializer,
    OwnershipSerializer,
    PayoutFilterSerializer,
    PayoutSerializer,
    SeriesQuerySerializer,
    SeriesSerializer,
    StatementDetailSerializer,
    StatementFilterSerializer,
    StatementLineSerializer,
    StatementSerializer,
    gpus_data,
    lines_rendering,
    row_sources,
    rows_data,
    series_points_json,
)
from api.throttling import ApiKeyRateThrottle
from billing.models import Statement
from billing.reports import line_terms, render_csv, render_pdf, statement_report
from fleet.models import Ownership


class ApiView(GenericAPIView[Any]):
    authentication_classes = (ApiKeyAuthentication,)
    throttle_classes = (ApiKeyRateThrottle,)
    renderer_classes: Sequence[type[BaseRenderer]] = (JSONRenderer,)
    pagination_class: type[BasePagination] | None = ApiCursorPagination
    filter_backends: Sequence[type[BaseFilterBackend]] = (ApiOrderingFilter,)
    ordering_fields: Sequence[str] = ()
    filter_serializer: type[serializers.Serializer[Any]] | None = None

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return problem_exception_handler

    @property
    def caller(self) -> Caller:
        caller: Any = self.request.user
        if not isinstance(caller, Caller):
            raise TypeError("API views run behind key authentication: the user is a Caller")
        return caller

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # the key, its scope, its rate first
        if request.method in ("GET", "HEAD") and isinstance(self, ListModelMixin):
            self.refuse_unknown_query()

    def refuse_unknown_query(self) -> None:
        """400 naming query parameters a list does not take: a typo (``ownr=``) would
        otherwise answer the whole list as if it had filtered it."""
        known = _query_names(type(self))
        unknown = sorted(set(self.request.query_params) - known)
        if unknown:
            takes = ", ".join(sorted(known)) or "no parameters"
            raise serializers.ValidationError(
                {name: [f"Unknown query parameter; this list takes {takes}."] for name in unknown}
            )

    def query(self) -> dict[str, Any]:
        """The validated query parameters (400 with the reason otherwise)."""
        if self.filter_serializer is None:
            return {}
        params = self.filter_serializer(data=self.request.query_params)
        params.is_valid(raise_exception=True)
        return dict(params.validated_data)


@functools.cache
def _query_names(view: type[ApiView]) -> frozenset[str]:
    """The query parameters a list view takes: its filters, the paginator's and the ordering
    filter's. Per class, once: building the filter serializer's fields costs CPU."""
    names = set(view.filter_serializer().fields) if view.filter_serializer is not None else set()
    if view.pagination_class is not None:
        paginator: Any = view.pagination_class()
        for attribute in ("cursor_query_param", "page_size_query_param"):
            if getattr(paginator, attribute, None):
                names.add(getattr(paginator, attribute))
    for backend in view.filter_backends:
        if issubclass(backend, OrderingFilter):
            names.add(backend.ordering_param)
    if api_settings.URL_FORMAT_OVERRIDE:  # ?format=csv, as on every other view
        names.add(api_settings.URL_FORMAT_OVERRIDE)
    return frozenset(names)


def _filters(serializer: type[serializers.Serializer[Any]]) -> Any:
    return extend_schema(parameters=[serializer])


class _Spliced:
    """A document whose member ``key`` is already compact JSON (``raw``)."""

    def __init__(self, head: dict[str, Any], key: str, raw: bytes) -> None:
        self.head, self.key, self.raw = head, key, raw


class _SplicedJSONRenderer(JSONRenderer):
    """``JSONRenderer``, splicing an already-rendered member into the document: the same
    bytes as rendering it whole (compact JSON is the concatenation of its parts)."""

    _HOLE = '"spliced-' + secrets.token_hex(16) + '"'

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        if not isinstance(data, _Spliced):
            return super().render(data, accepted_media_type, renderer_context)
        if self.get_indent(accepted_media_type, renderer_context or {}) is not None:
            whole = {**data.head, data.key: json.loads(data.raw)}  # pretty-printed: rare
            return super().render(whole, accepted_media_type, renderer_context)
        head = {**data.head, data.key: self._HOLE[1:-1]}
        body = super().render(head, accepted_media_type, renderer_context)
        if body.count(self._HOLE.encode()) != 1:
            raise RuntimeError("the rendered head must hold the raw body's place exactly once")
        return body.replace(self._HOLE.encode(), data.raw)


# --- owners ---------------------------------------------------------------------------------


class _OwnerMixin(ApiView):
    serializer_class = OwnerSerializer
    permission_classes = (AnyScope,)
    ordering = "legal_name"
    ordering_fields = ("legal_name",)

    def get_queryset(self) -> QuerySet[Any]:
        return access.owners_for_caller(caller=self.caller)

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        user: Any = self.request.user
        if isinstance(user, Caller):
            by_owner: dict[Any, list[str]] = {}
            for scope in sorted(self.caller.scopes):
                for owner_id in access.owner_ids_for_caller(caller=self.caller, scope=scope):
                    by_owner.setdefault(owner_id, []).append(scope)
            context["scopes_by_owner"] = by_owner
        return context


class OwnerList(_OwnerMixin, ListAPIView[Any]):
    """Owner accounts this key may read, with the scopes it may read them in."""


class OwnerDetail(_OwnerMixin, RetrieveAPIView[Any]):
    pass


# --- GPUs -----------------------------------------------------------------------------------


class _GpuMixin(ApiView):
    serializer_class = GpuSerializer
    permission_classes = (FleetRead,)
    ordering = "serial"
    ordering_fields = ("serial", "created_at")

    def get_queryset(self) -> QuerySet[Any]:
        return access.gpus_for_caller(caller=self.caller, scope=ApiScope.FLEET_READ)


@_filters(GpuFilterSerializer)
class GpuList(_GpuMixin, ListAPIView[Any]):
    """GPUs your accounts hold or held, with their state and placement now."""

    filter_serializer = GpuFilterSerializer

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # Rows in plain SQL, not the annotated queryset through the nested serializers: the
        # same document (tests/api/test_rendering.py, test_gpu_rows.py) for less CPU.
        now = datetime.now(UTC)
        rows: Any = self.rows(now)  # duck-typed for the ordering filter and the paginator
        page: list[dict[str, Any]] | None = self.paginate_queryset(self.filter_queryset(rows))
        if page is None:
            raise RuntimeError("list views always paginate")
        holdings = access.holdings_for_caller(
            caller=self.caller,
            scope=ApiScope.FLEET_READ,
            gpu_ids=[row["id"] for row in page],
            now=now,
        )
        return self.get_paginated_response(gpus_data(page, holdings))

    def rows(self, now: datetime) -> access.GpuRows:
        """What ``get_queryset`` filters, as ``access.GpuRows``."""
        q = self.query()
        return access.gpu_rows_for_caller(
            caller=self.caller,
            scope=ApiScope.FLEET_READ,
            now=now,
            held_at=now if q["held"] == "now" else None,
            owner=q.get("owner"),
            lifecycle_state=q.get("lifecycle_state"),
            cluster=q.get("cluster"),
            model=q.get("model"),
        )

    def get_queryset(self) -> QuerySet[Any]:
        """The GPUs as a queryset: the schema's view of this list, and the reference that
        tests/api/test_gpu_rows.py compares ``rows`` with."""
        q = self.query()
        now = datetime.now(UTC)
        held_at = now if q["held"] == "now" else None
        gpus = access.gpus_for_caller(
            caller=self.caller, scope=ApiScope.FLEET_READ, held_at=held_at, now=now
        )
        if "owner" in q:
            # Only an owner the key may read: filtering by anyone else's id would reveal
            # which of your GPUs they share.
            visible = access.owner_ids_for_caller(caller=self.caller, scope=ApiScope.FLEET_READ)
            if q["owner"] not in visible:
                return gpus.none()
            rows = Ownership.objects.filter(gpu=OuterRef("pk"), owner_id=q["owner"])
            if held_at is not None:
                rows = rows.filter(valid_from__lte=held_at).exclude(valid_to__lte=held_at)
            gpus = gpus.filter(Exists(rows))
        if "lifecycle_state" in q:
            gpus = gpus.filter(lifecycle_state=q["lifecycle_state"])
        if "cluster" in q:
            gpus = gpus.filter(Q(cluster_code=q["cluster"]))  # annotated: where it is now
        if "model" in q:
            gpus = gpus.filter(model__name=q["model"])
        return gpus


class GpuDetail(_GpuMixin, RetrieveAPIView[Any]):
    pass


class GpuOwnership(ApiView, ListAPIView[Any]):
    """The GPU's ownership history, your accounts' rows only (others' are not shown)."""

    serializer_class = OwnershipSerializer
    permission_classes = (FleetRead,)
    ordering = ("valid_from", "id")

    def get_queryset(self) -> QuerySet[Any]:
        gpu = access.gpu_for_caller(
            caller=self.caller, scope=ApiScope.FLEET_READ, gpu_id=self.kwargs["pk"]
        )
        return access.ownership_for_caller(caller=self.caller, gpu=gpu)


class GpuSeries(ApiView):
    """Availability, utilization, busy GPU-hours and energy per hour, day or calendar month,
    counted over the seconds your accounts held the GPU (docs/accounting.md rules 1–3); a
    closed month's point shows what the GPU's lines on your statement for it show."""

    serializer_class = SeriesSerializer
    permission_classes = (TelemetryRead,)
    filter_serializer = SeriesQuerySerializer
    pagination_class = None
    filter_backends = ()
    renderer_classes = (_SplicedJSONRenderer,)

    @extend_schema(parameters=[SeriesQuerySerializer], responses=SeriesSerializer)
    def get(self, request: Request, pk: Any) -> Response:
        q = self.query()
        start, end, step = q["start"].astimezone(UTC), q["end"].astimezone(UTC), q["step"]
        months = month_starts(start=start, end=end) if step == "month" else None
        if step == "month":
            if months is None:
                raise serializers.ValidationError(
                    {"start": "Align start and end to the first second of a month (UTC)."}
                )
            buckets = len(months)
        else:
            width = STEPS[step]
            aligned = (start - datetime(2000, 1, 1, tzinfo=UTC)) % width
            if aligned or (end - start) % width:
                raise serializers.ValidationError(
                    {"start": f"Align start and end to a whole {step}."}
                )
            buckets = int((end - start) / width)
        if end <= start:
            raise serializers.ValidationError({"end": "The range ends after it starts."})
        if buckets > settings.API_SERIES_MAX_BUCKETS:
            raise serializers.ValidationError(
                {"end": f"At most {settings.API_SERIES_MAX_BUCKETS} {step}s per request."}
            )
        gpu = access.gpu_for_caller(
            caller=self.caller, scope=ApiScope.TELEMETRY_READ, gpu_id=pk, bare=True
        )
        owner_ids = access.owner_ids_for_caller(caller=self.caller, scope=ApiScope.TELEMETRY_READ)
        parts: Sequence[Any]
        if months is not None:
            parts = month_points(gpu=gpu, owner_ids=owner_ids, starts=months, end=end)
        else:
            parts = series_parts(gpu=gpu, owner_ids=owner_ids, start=start, end=end, step=step)
        head = {"gpu": str(gpu.pk), "step": step}
        return Response(_Spliced(head, "points", series_points_json(parts)))


# --- incidents and maintenance ---------------------------------------------------------------


class _EventMixin(ApiView):
    permission_classes = (FleetRead,)
    filter_serializer: type[serializers.Serializer[Any]] | None = EventFilterSerializer

    def gpu(self) -> Any:
        q = self.query()
        if "gpu" not in q:
            return None
        return access.gpu_for_caller(caller=self.caller, scope=ApiScope.FLEET_READ, gpu_id=q["gpu"])


@_filters(EventFilterSerializer)
class IncidentList(_EventMixin, ListAPIView[Any]):
    """Incidents that touched a GPU while your accounts held it."""

    serializer_class = IncidentSerializer
    ordering = ("-started_at", "-id")
    ordering_fields = ("started_at",)

    def get_queryset(self) -> QuerySet[Any]:
        return access.incidents_for_caller(caller=self.caller, gpu=self.gpu())


class IncidentDetail(_EventMixin, RetrieveAPIView[Any]):
    serializer_class = IncidentSerializer
    filter_serializer = None

    def get_queryset(self) -> QuerySet[Any]:
        return access.incidents_for_caller(caller=self.caller)


@_filters(EventFilterSerializer)
class MaintenanceList(_EventMixin, ListAPIView[Any]):
    """Announced maintenance that covers (or will cover) a GPU your accounts held then."""

    serializer_class = MaintenanceSerializer
    ordering = ("-starts_at", "-id")
    ordering_fields = ("starts_at",)

    def get_queryset(self) -> QuerySet[Any]:
        return access.maintenance_for_caller(caller=self.caller, gpu=self.gpu())


class MaintenanceDetail(_EventMixin, RetrieveAPIView[Any]):
    serializer_class = MaintenanceSerializer
    filter_serializer = None

    def get_queryset(self) -> QuerySet[Any]:
        return access.maintenance_for_caller(caller=self.caller)


# --- statements and payouts -----------------------------------------------------------------


class _StatementMixin(ApiView):
    permission_classes = (StatementsRead,)

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        context["disclosure_texts"] = disclosure_texts_published(getattr(self, "_cited", set()))
        return context

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        instance = args[0] if args else None
        if instance is not None:
            rows = instance if isinstance(instance, list) else [instance]
            self._cited = {(s.disclosure_version, s.disclosure_sha256) for s in rows}
        return super().get_serializer(*args, **kwargs)


@_filters(StatementFilterSerializer)
class StatementList(_StatementMixin, ListAPIView[Any]):
    """Published statements of your accounts; each carries its basis and disclosure."""

    serializer_class = StatementSerializer
    filter_serializer = StatementFilterSerializer
    ordering = ("-period_start", "id")
    ordering_fields = ("period_start", "published_at")

    def get_queryset(self) -> QuerySet[Any]:
        q = self.query()
        rows = (
            access.statements_for_caller(caller=self.caller)
            .select_related("period")
            .annotate(period_start=F("period__start"))
        )
        if "owner" in q:
            rows = rows.filter(owner_id=q["owner"])
        if "currency" in q:
            rows = rows.filter(currency=q["currency"])
        if "period_start_from" in q:
            rows = rows.filter(period__start__gte=q["period_start_from"])
        if "period_start_before" in q:
            rows = rows.filter(period__start__lt=q["period_start_before"])
        return rows


def _etag_matches(request: Request, etag: str) -> bool:
    header = request.headers.get("If-None-Match", "")
    tags = {t.strip().removeprefix("W/") for t in header.split(",") if t.strip()}
    return etag in tags or "*" in tags


def _lines_json(statement: Statement) -> bytes:
    """The published statement's lines as compact JSON, rendered once and kept in the cache.

    A published statement and its lines never change (database triggers, billing migration
    0002), so the key is the statement, its content hash and the lines' rendering; the caller
    has already been checked for this request. One query on a miss, none on a hit."""
    key = f"api:statement-lines:{lines_rendering()}:{statement.pk}:{statement.content_sha256}"
    body = cache.get(key)
    if body is None:
        lines = statement.lines.order_by("position").values_list(
            *row_sources(StatementLineSerializer)
        )
        rows = rows_data(StatementLineSerializer, lines)
        # Each line's terms, read from the frozen inputs (docs/accounting.md).
        terms = line_terms(frozen=statement.frozen_inputs, kinds=[r["kind"] for r in rows])
        body = JSONRenderer().render(
            [{**row, "terms": t} for row, t in zip(rows, terms, strict=True)]
        )
        cache.set(key, body, timeout=settings.API_STATEMENT_LINES_CACHE_S)
    return bytes(body)


class StatementDetail(_StatementMixin):
    """One published statement with its lines. ``ETag`` is its content SHA-256: send it back
    in ``If-None-Match`` and an unchanged statement answers 304."""

    serializer_class = StatementDetailSerializer
    renderer_classes = (_SplicedJSONRenderer,)

    def get(self, request: Request, pk: Any) -> Response:
        statement = access.statement_for_caller(caller=self.caller, statement_id=pk)
        etag = f'"{statement.content_sha256}"'
        if _etag_matches(request, etag):
            return Response(status=304, headers={"ETag": etag})
        self._cited = {(statement.disclosure_version, statement.disclosure_sha256)}
        head = StatementSerializer(statement, context=self.get_serializer_context()).data
        document = _Spliced(dict(head), "lines", _lines_json(statement))
        return Response(document, headers={"ETag": etag})


class CsvRenderer(BaseRenderer):
    """Lets a client ask for ``text/csv``; problems are still JSON documents."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        if isinstance(data, (bytes, str)):
            return data
        return json.dumps(data).encode()


class PdfRenderer(BaseRenderer):
    """Lets a client ask for ``application/pdf``; problems are still JSON documents."""

    media_type = "application/pdf"
    format = "pdf"
    charset = None

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        if isinstance(data, bytes):
            return data
        return json.dumps(data).encode()


def _download(
    statement: Statement, body: bytes | str, content_type: str, etag: str
) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["ETag"] = etag
    start = statement.period.start.strftime("%Y-%m")
    extension = "pdf" if content_type == "application/pdf" else "csv"
    response["Content-Disposition"] = (
        f'attachment; filename="statement-{start}-{statement.currency}-{statement.pk}.{extension}"'
    )
    return response


class StatementCsv(_StatementMixin):
    """The statement as CSV: its basis and disclosure first, then one row per line; then
    payouts, maintenance and incidents, and the figures by day, each as a section; the
    totals last."""

    renderer_classes = (JSONRenderer, CsvRenderer)

    @extend_schema(
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="The statement."),
            304: OpenApiResponse(description="Not modified (If-None-Match)."),
        }
    )
    def get(self, request: Request, pk: Any) -> HttpResponse | Response:
        statement = access.statement_for_caller(caller=self.caller, statement_id=pk)
        etag = f'"{statement.content_sha256}-csv"'
        if _etag_matches(request, etag):
            return Response(status=304, headers={"ETag": etag})
        body = render_csv(statement_report(statement))
        return _download(statement, body, "text/csv; charset=utf-8", etag)


class StatementPdf(_StatementMixin):
    """The statement as PDF: summary, per-GPU tables, adjustments, incidents and maintenance,
    daily charts, the basis of every figure, the disclosure and the content hash. The same
    statement gives the same bytes every time; its ``ETag`` is the SHA-256 of those bytes."""

    renderer_classes = (JSONRenderer, PdfRenderer)

    @extend_schema(
        responses={
            (200, "application/pdf"): OpenApiResponse(
                OpenApiTypes.BINARY, description="The statement as PDF."
            ),
            304: OpenApiResponse(description="Not modified (If-None-Match)."),
        }
    )
    def get(self, request: Request, pk: Any) -> HttpResponse | Response:
        statement = access.statement_for_caller(caller=self.caller, statement_id=pk)
        body = render_pdf(statement_report(statement))
        # The PDF also prints what can change after publishing (the payout of the balance,
        # the addresses): its tag is the hash of its own bytes.
        etag = f'"{hashlib.sha256(body).hexdigest()}-pdf"'
        if _etag_matches(request, etag):
            return Response(status=304, headers={"ETag": etag})
        return _download(statement, body, "application/pdf", etag)


@_filters(PayoutFilterSerializer)
class PayoutList(ApiView, ListAPIView[Any]):
    """Payouts recorded against your accounts' balances."""

    serializer_class = PayoutSerializer
    permission_classes = (StatementsRead,)
    filter_serializer = PayoutFilterSerializer
    ordering = ("-paid_on", "-id")
    ordering_fields = ("paid_on",)

    def get_queryset(self) -> QuerySet[Any]:
        q = self.query()
        rows = access.payouts_for_caller(caller=self.caller)
        if "owner" in q:
            rows = rows.filter(owner_id=q["owner"])
        if "currency" in q:
            rows = rows.filter(currency=q["currency"])
        if "paid_from" in q:
            rows = rows.filter(paid_on__gte=q["paid_from"])
        if "paid_before" in q:
            rows = rows.filter(paid_on__lt=q["paid_before"])
        return rows


@extend_schema(exclude=True)
class NoSuchEndpoint(APIView):
    """Any other path under /api/v1/: a problem document, not the site's HTML page."""

    authentication_classes = ()
    permission_classes = ()
    renderer_classes = (JSONRenderer,)

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return problem_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        raise NotFound("No such endpoint; see /api/v1/schema.")
