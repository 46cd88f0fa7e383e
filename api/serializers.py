"""Shapes of the partner API's answers and of its query parameters. No logic here."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.settings import api_settings

from accounts.models import Disclosure, Owner
from api.selectors import PlainBucket, plain_point
from billing.engine.document import BASIS, NOT_GUARANTEED, ratio_of
from billing.models import Payout, Statement, StatementLine
from billing.models.statements import LINE_FIELDS
from fleet.models import Gpu, Incident, LifecycleState, MaintenanceWindow, Ownership


class OwnerSerializer(serializers.ModelSerializer[Owner]):
    scopes = serializers.SerializerMethodField(help_text="What this key may read of the owner.")

    class Meta:
        model = Owner
        fields = ("id", "kind", "legal_name", "billing_currency", "time_zone", "scopes")

    def get_scopes(self, owner: Owner) -> list[str]:
        return list(self.context["scopes_by_owner"].get(owner.pk, []))


class HoldingSerializer(serializers.ModelSerializer[Ownership]):
    class Meta:
        model = Ownership
        fields = ("owner_id", "share_bps", "valid_from", "valid_to")


class OwnershipSerializer(serializers.ModelSerializer[Ownership]):
    class Meta:
        model = Ownership
        # Not ``reason``: its free text may name the other party of a sale or transfer (the
        # portal and the ``ownership.changed`` webhook keep it private too).
        fields = ("id", "owner_id", "share_bps", "valid_from", "valid_to")


class PlacementNowSerializer(serializers.Serializer[Any]):
    site = serializers.CharField(source="site_code")
    cluster = serializers.CharField(source="cluster_code")
    node = serializers.CharField(source="hostname")
    slot = serializers.IntegerField()


class GpuSerializer(serializers.ModelSerializer[Gpu]):
    model = serializers.CharField(source="model.name")
    memory_mib = serializers.IntegerField(source="model.memory_mib")
    telemetry_state = serializers.CharField(
        allow_null=True,
        help_text="up, degraded, down or no_data now; null before any telemetry. A GPU whose "
        "telemetry ended (telemetry_last_seen_at longer ago than the staleness allowance, "
        "3 minutes unless the operator set another) is no_data, whatever state its telemetry "
        "last reported.",
    )
    telemetry_state_since = serializers.DateTimeField(
        allow_null=True,
        help_text="When that state began; for no_data after telemetry ended, the end of the "
        "last second it covered.",
    )
    telemetry_last_seen_at = serializers.DateTimeField(
        allow_null=True,
        help_text="The end of the last second the GPU's telemetry covers (its last window's "
        "window_start + observed_to); null before any telemetry.",
    )
    placement = serializers.SerializerMethodField()
    holdings = HoldingSerializer(
        source="visible_holdings", many=True, help_text="Your accounts' shares now."
    )

    class Meta:
        model = Gpu
        fields = (
            "id",
            "serial",
            "nvml_uuid",
            "model",
            "memory_mib",
            "lifecycle_state",
            "telemetry_state",
            "telemetry_state_since",
            "telemetry_last_seen_at",
            "placement",
            "holdings",
        )

    @extend_schema_field(PlacementNowSerializer(allow_null=True))
    def get_placement(self, gpu: Gpu) -> dict[str, Any] | None:
        if getattr(gpu, "hostname", None) is None:
            return None
        return PlacementNowSerializer(gpu).data


class GpuFilterSerializer(serializers.Serializer[Any]):
    owner = serializers.UUIDField(required=False)
    lifecycle_state = serializers.ChoiceField(choices=LifecycleState.choices, required=False)
    cluster = serializers.CharField(required=False, help_text="Cluster code, where it is now.")
    model = serializers.CharField(required=False, help_text="GPU model name, exactly.")
    held = serializers.ChoiceField(
        choices=[("now", "held now"), ("ever", "held now or before")], default="ever"
    )


class SeriesQuerySerializer(serializers.Serializer[Any]):
    start = serializers.DateTimeField(help_text="Inclusive, aligned to the step, UTC.")
    end = serializers.DateTimeField(help_text="Exclusive.")
    step = serializers.ChoiceField(
        choices=[("hour", "hour"), ("day", "day"), ("month", "month")],
        default="hour",
        help_text="month: calendar months, start and end on the first second of one.",
    )


class SeriesPointSerializer(serializers.Serializer[Any]):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    held_s = serializers.IntegerField(help_text="Seconds your accounts held the GPU.")
    in_service_s = serializers.IntegerField()
    up_s = serializers.IntegerField()
    down_s = serializers.IntegerField()
    maintenance_s = serializers.IntegerField()
    no_data_s = serializers.IntegerField()
    availability = serializers.DecimalField(max_digits=9, decimal_places=6, allow_null=True)
    utilization = serializers.DecimalField(max_digits=9, decimal_places=6, allow_null=True)
    busy_gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=6)
    energy_kwh = serializers.DecimalField(max_digits=16, decimal_places=6)


class SeriesSerializer(serializers.Serializer[Any]):
    gpu = serializers.UUIDField()
    step = serializers.CharField()
    points = SeriesPointSerializer(many=True)


class IncidentSerializer(serializers.ModelSerializer[Incident]):
    status = serializers.SerializerMethodField()

    class Meta:
        model = Incident
        fields = ("id", "title", "cause", "started_at", "ended_at", "status", "notes_for_owners")

    def get_status(self, incident: Incident) -> str:
        return "open" if incident.ended_at is None else "resolved"


class MaintenanceSerializer(serializers.ModelSerializer[MaintenanceWindow]):
    class Meta:
        model = MaintenanceWindow
        fields = (
            "id",
            "title",
            "description",
            "announced_at",
            "starts_at",
            "ends_at",
            "cancelled_at",
        )


class EventFilterSerializer(serializers.Serializer[Any]):
    gpu = serializers.UUIDField(required=False, help_text="Only events that touched this GPU.")


class DisclosureSerializer(serializers.ModelSerializer[Disclosure]):
    class Meta:
        model = Disclosure
        fields = ("version", "text_sha256", "text")


class PeriodSerializer(serializers.Serializer[Any]):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class BasisSerializer(serializers.Serializer[Any]):
    """What an earnings figure means (DESIGN, Disclosures)."""

    period = PeriodSerializer()
    finality = serializers.ChoiceField(choices=["final", "preliminary"])
    gross = serializers.CharField()
    net = serializers.CharField()
    costs_included = serializers.ListField(child=serializers.CharField())
    time_zone = serializers.CharField()
    not_guaranteed = serializers.CharField()


def statement_basis(statement: Statement) -> dict[str, Any]:
    return {
        "period": {"start": statement.period.start, "end": statement.period.end},
        "finality": "final" if statement.status == Statement.Status.PUBLISHED else "preliminary",
        "gross": BASIS["gross"],
        "net": BASIS["net"],
        "costs_included": BASIS["costs_included"],
        "time_zone": BASIS["time_zone"],
        "not_guaranteed": NOT_GUARANTEED,
    }


@functools.cache
def _basis_serializer() -> BasisSerializer:
    """One ``BasisSerializer`` renders every statement's basis: making one per statement
    deep-copies its fields each time. It holds no state between calls (no data, no context)."""
    return BasisSerializer()


class StatementLineSerializer(serializers.ModelSerializer[StatementLine]):
    class Meta:
        model = StatementLine
        fields = LINE_FIELDS


class StatementSerializer(serializers.ModelSerializer[Statement]):
    basis = serializers.SerializerMethodField()
    disclosure = serializers.SerializerMethodField()

    class Meta:
        model = Statement
        fields: tuple[str, ...] = (
            "id",
            "owner_id",
            "currency",
            "status",
            "opening_balance",
            "lines_total",
            "adjustments_total",
            "payouts_total",
            "closing_balance",
            "content_sha256",
            "published_at",
            "basis",
            "disclosure",
        )

    @extend_schema_field(BasisSerializer)
    def get_basis(self, statement: Statement) -> dict[str, Any]:
        return _basis_serializer().to_representation(statement_basis(statement))

    @extend_schema_field(DisclosureSerializer)
    def get_disclosure(self, statement: Statement) -> dict[str, Any]:
        cited = (statement.disclosure_version, statement.disclosure_sha256)
        return {
            "version": statement.disclosure_version,
            "text_sha256": statement.disclosure_sha256,
            "text": self.context["disclosure_texts"].get(cited, ""),
        }


# ``StatementDetail`` renders the figures from rows and adds the terms.
@extend_schema_serializer(component_name="StatementLine")
class StatementLineWithTermsSerializer(StatementLineSerializer):
    """A statement line: its figures and, for a GPU line, the terms they were computed from
    (docs/accounting.md, "The terms of each line")."""

    terms = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="A GPU line's terms: cluster and span, up seconds, share, rentals, pool, "
        "revenue and rate cards in force (docs/accounting.md); null for an adjustment.",
    )

    class Meta(StatementLineSerializer.Meta):
        fields = (*LINE_FIELDS, "terms")


class StatementDetailSerializer(StatementSerializer):
    lines = StatementLineWithTermsSerializer(many=True)

    class Meta(StatementSerializer.Meta):
        fields = (*StatementSerializer.Meta.fields, "lines")


class StatementFilterSerializer(serializers.Serializer[Any]):
    owner = serializers.UUIDField(required=False)
    currency = serializers.RegexField(r"^[A-Z]{3}$", required=False)
    period_start_from = serializers.DateTimeField(required=False)
    period_start_before = serializers.DateTimeField(required=False)


class PayoutSerializer(serializers.ModelSerializer[Payout]):
    basis = serializers.SerializerMethodField()

    class Meta:
        model = Payout
        fields = ("id", "owner_id", "currency", "amount", "paid_on", "reference", "basis")

    def get_basis(self, payout: Payout) -> str:
        return (
            "An amount paid out of the owner's balance of published (final) statements; it is "
            "shown on the statement of the period it is dated in. " + NOT_GUARANTEED
        )


class PayoutFilterSerializer(serializers.Serializer[Any]):
    owner = serializers.UUIDField(required=False)
    currency = serializers.RegexField(r"^[A-Z]{3}$", required=False)
    paid_from = serializers.DateField(required=False)
    paid_before = serializers.DateField(required=False)


# --- many rows at once -------------------------------------------------------------------------
# A statement has a line per GPU and a series up to 744 points: DRF's per-object walk over
# fields costs more than the query. For a serializer of plain fields (no nesting, no method
# fields) these give what ``serializer(rows, many=True).data`` gives, from tuples in the order
# of its fields (``row_sources``), converting each value with the field's own rules.


def _datetime(value: datetime) -> str:
    text = value.astimezone(UTC).isoformat()  # the API's time zone is UTC (DRF's rule)
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _converter(field: serializers.Field[Any, Any, Any, Any]) -> Callable[[Any], Any]:
    if (
        isinstance(field, serializers.DateTimeField)
        and getattr(field, "format", api_settings.DATETIME_FORMAT) == "iso-8601"
    ):
        return _datetime
    plain_decimal = (
        getattr(field, "coerce_to_string", api_settings.COERCE_DECIMAL_TO_STRING)
        and not field.localize
        and not field.normalize_output
        if isinstance(field, serializers.DecimalField)
        else False
    )
    if isinstance(field, serializers.DecimalField) and plain_decimal:
        places, slow = field.decimal_places, field.to_representation

        def decimal(value: Any) -> Any:
            # Already at the field's scale (as read from a numeric column): DRF's quantize
            # would change nothing. Fixed-point text shows exactly -exponent decimals.
            if places and isinstance(value, Decimal):
                text = f"{value:f}"
                dot = text.find(".")
                if dot >= 0 and len(text) - dot - 1 == places:
                    return text
            return slow(value)

        return decimal
    if isinstance(field, serializers.ReadOnlyField):
        return lambda value: value
    return field.to_representation


@functools.cache
def _plain_fields(
    serializer_class: type[serializers.Serializer[Any]],
) -> tuple[tuple[str, str, Callable[[Any], Any]], ...]:
    out = []
    for name, field in serializer_class().fields.items():
        if isinstance(field, (serializers.BaseSerializer, serializers.SerializerMethodField)):
            raise TypeError(f"{serializer_class.__name__}.{name}: plain fields only")
        out.append((name, str(field.source), _converter(field)))
    return tuple(out)


# Raise when the rendering of a value changes without a change of fields (``_converter``):
# stored renderings of statement lines are keyed by it.
# 2: lines carry their terms.
LINES_RENDERING_VERSION = 2


@functools.cache
def lines_rendering() -> str:
    """A short digest of how ``StatementLineSerializer`` renders (names, sources, kinds,
    scales, and ``LINES_RENDERING_VERSION``): part of the key of stored renderings, so a
    change of fields misses them."""
    shape: list[Any] = [LINES_RENDERING_VERSION]
    shape += [
        (name, str(f.source), type(f).__name__, getattr(f, "decimal_places", None))
        for name, f in StatementLineSerializer().fields.items()
    ]
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:12]


def row_sources(serializer_class: type[serializers.Serializer[Any]]) -> list[str]:
    """The attributes to read (``values_list(*row_sources(S))``), in the fields' order."""
    return [source for _, source, _ in _plain_fields(serializer_class)]


def rows_data(
    serializer_class: type[serializers.Serializer[Any]], rows: Iterable[Sequence[Any]]
) -> list[dict[str, Any]]:
    fields = _plain_fields(serializer_class)
    return [
        {
            name: None if value is None else convert(value)
            for (name, _, convert), value in zip(fields, row, strict=True)
        }
        for row in rows
    ]


# The GPU list: ``GpuSerializer``'s document from plain rows (``GPU_ROW_SOURCES`` of
# ``gpus_for_caller(...).values(...)``) and the holdings read for the page in one query.
GPU_ROW_SOURCES: dict[str, str] = {
    "id": "id",
    "serial": "serial",
    "nvml_uuid": "nvml_uuid",
    "model": "model__name",
    "memory_mib": "model__memory_mib",
    "lifecycle_state": "lifecycle_state",
    "telemetry_state": "telemetry_state",
    "telemetry_state_since": "telemetry_state_since",
    "telemetry_last_seen_at": "telemetry_last_seen_at",
}
PLACEMENT_SOURCES = ("site_code", "cluster_code", "hostname", "slot")


@functools.cache
def _gpu_converters() -> tuple[
    tuple[tuple[str, str, Callable[[Any], Any]], ...],
    tuple[tuple[str, str, Callable[[Any], Any]], ...],
]:
    fields = GpuSerializer().fields
    if list(fields) != [*GPU_ROW_SOURCES, "placement", "holdings"]:
        raise RuntimeError(f"GpuSerializer's fields changed: {list(fields)}; update the rows")
    top = tuple(
        (name, source, _converter(fields[name])) for name, source in GPU_ROW_SOURCES.items()
    )
    placement = PlacementNowSerializer().fields
    nested = tuple(
        (name, str(field.source), _converter(field)) for name, field in placement.items()
    )
    if [source for _, source, _ in nested] != list(PLACEMENT_SOURCES):
        raise RuntimeError("the placement's fields changed; update PLACEMENT_SOURCES")
    return top, nested


def gpus_data(
    rows: Iterable[dict[str, Any]], holdings: dict[Any, list[tuple[Any, ...]]]
) -> list[dict[str, Any]]:
    """What ``GpuSerializer(gpus, many=True).data`` gives, from ``values()`` rows (with
    ``GPU_ROW_SOURCES`` and the placement annotations) and ``holdings`` per GPU id."""
    top, nested = _gpu_converters()
    out = []
    for row in rows:
        item: dict[str, Any] = {}
        for name, source, convert in top:
            value = row[source]
            item[name] = None if value is None else convert(value)
        if row["hostname"] is None:
            item["placement"] = None
        else:
            item["placement"] = {
                name: None if row[source] is None else convert(row[source])
                for name, source, convert in nested
            }
        item["holdings"] = rows_data(HoldingSerializer, holdings.get(row["id"], ()))
        out.append(item)
    return out


# The series: a plain bucket (``api.selectors.PlainBucket``: in service and held throughout,
# no maintenance or incident) is written straight from the rollups' integer sums, with the
# figures ``SeriesPointSerializer`` shows for its point (``api.selectors.plain_point``); any
# other point through ``rows_data``. tests/api/test_series_fast_path.py compares the two.
_PLAIN_POINT_FIELDS = (  # as series_points_json writes them
    "start",
    "end",
    "held_s",
    "in_service_s",
    "up_s",
    "down_s",
    "maintenance_s",
    "no_data_s",
    "availability",
    "utilization",
    "busy_gpu_hours",
    "energy_kwh",
)
_SECOND = timedelta(seconds=1)


@functools.cache
def _series_shape_checked() -> bool:
    """The template above is ``SeriesPointSerializer``'s shape: the same fields in the same
    order, its decimals shown as fixed 6-place strings."""
    fields = SeriesPointSerializer().fields
    if tuple(fields) != _PLAIN_POINT_FIELDS:
        raise RuntimeError(f"SeriesPointSerializer's fields changed: {list(fields)}")
    for name in _PLAIN_POINT_FIELDS[8:]:
        if _converter(fields[name])(Decimal("0.5")) != "0.500000":
            raise RuntimeError(f"SeriesPointSerializer.{name} no longer shows 6 places")
    return True


def _six(numerator: int, denominator: int) -> str:
    """numerator ÷ denominator (numerator ≥ 0, denominator > 0) rounded half-even to 6
    places, as a JSON string in fixed point: how the series' decimals render."""
    text = ratio_of(numerator, denominator)
    if text is None:
        raise ValueError(f"{numerator} ÷ {denominator}: the denominator must be above 0")
    return f'"{text}"'


def _utc_text(at: datetime) -> str:
    """``_datetime(at)``, without the conversion when ``at`` is already in UTC."""
    return at.isoformat()[:-6] + "Z" if at.tzinfo is UTC else _datetime(at)


def series_points_json(parts: Sequence[Any]) -> bytes:
    """What ``JSONRenderer`` gives for ``rows_data(SeriesPointSerializer, points)`` of the
    points of ``parts`` (``api.selectors.series_parts``)."""
    _series_shape_checked()
    sources = row_sources(SeriesPointSerializer)
    out: list[str] = []
    at: datetime | None = None
    at_text = ""
    availability: dict[tuple[int, int], str] = {}  # (up, seconds): mostly a handful
    for part in parts:
        if type(part) is PlainBucket:
            start, end, up, down, busy, energy = part
            if up >= 0 and busy >= 0 and energy >= 0:
                start_text = at_text if start == at else _utc_text(start)
                at, at_text = end, _utc_text(end)
                seconds = (end - start) // _SECOND
                shown = availability.get((up, seconds))
                if shown is None:
                    shown = availability[up, seconds] = _six(up, seconds)
                utilization = _six(busy, 100_000 * up) if up else "null"
                out.append(
                    f'{{"start":"{start_text}","end":"{at_text}","held_s":{seconds},'
                    f'"in_service_s":{seconds},"up_s":{up},"down_s":{down},'
                    f'"maintenance_s":0,"no_data_s":{seconds - down - up},'
                    f'"availability":{shown},"utilization":{utilization},'
                    f'"busy_gpu_hours":{_six(busy, 360_000_000)},'
                    f'"energy_kwh":{_six(energy, 1_000_000_000)}}}'
                )
                continue
        point = plain_point(part) if isinstance(part, PlainBucket) else part
        (row,) = rows_data(SeriesPointSerializer, [[getattr(point, s) for s in sources]])
        out.append(JSONRenderer().render(row).decode())
    return ("[" + ",".join(out) + "]").encode()
