"""Statements, series and the GPU list are rendered row by row without DRF's per-object walk
(``api.serializers.rows_data``, ``gpus_data``), and a published statement's lines once (the
cache): the bytes must be exactly what the serializers give."""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from accounts import services as accounts
from accounts.models import Disclosure, PartnerGrant
from accounts.selectors import disclosure_texts_published
from api.selectors import SeriesPoint
from api.serializers import (
    BasisSerializer,
    SeriesPointSerializer,
    StatementDetailSerializer,
    StatementLineSerializer,
    StatementSerializer,
    _plain_fields,
    row_sources,
    rows_data,
    statement_basis,
)
from billing.models import Statement, StatementLine
from fleet.models import Placement
from telemetry.models import GpuStateTransition
from tests.api.conftest import ALL_SCOPES, NOW, client_for
from tests.billing import scenario as s

MINUTE = dt.timedelta(minutes=1)

UTC = dt.UTC


def _cited_texts() -> dict[str, dict[tuple[str, str], str]]:
    """The serializer's context as the views build it: published disclosures' texts by
    (version, SHA-256)."""
    published = Disclosure.objects.filter(published_at__isnull=False)
    texts = {(d.version, d.text_sha256): d.text for d in published}
    return {"disclosure_texts": texts}


def _json(data):
    return JSONRenderer().render(data)


@pytest.fixture
def draft_lines(world):
    """A draft statement (lines can still be added) with nulls, negatives and odd scales."""
    source = world.a.statement
    draft = Statement.objects.create(
        owner=world.a.owner,
        period=source.period,
        currency="USD",
        opening_balance=Decimal("0.00"),
        lines_total=Decimal("-3.10"),
        adjustments_total=Decimal("0.00"),
        payouts_total=Decimal("0.00"),
        closing_balance=Decimal("-3.10"),
        frozen_inputs={},
        content_sha256="d" * 64,
        disclosure_version=source.disclosure_version,
        disclosure_sha256=source.disclosure_sha256,
        computed_at=NOW,
    )
    line = source.lines.get()
    StatementLine.objects.create(
        statement=draft,
        position=1,
        kind=StatementLine.Kind.GPU,
        gpu=world.a.gpu,
        description="+cmd|' /C calc'!A0",
        starts_at=dt.datetime(2026, 2, 3, 4, 5, 6, 789000, tzinfo=UTC),
        ends_at=dt.datetime(2026, 3, 1, tzinfo=UTC),
        share_bps=2_500,
        in_service_s=86_399,
        up_s=80_000,
        down_s=6_399,
        availability=Decimal("0.925937"),
        utilization=Decimal("0"),
        busy_gpu_hours=Decimal("0.000001"),
        energy_kwh=Decimal("12345678.9"),
        gross=Decimal("0.10"),
        hosting_fee=Decimal("3.20"),
        net=Decimal("-3.10"),
    )
    StatementLine.objects.create(
        statement=draft,
        position=2,
        kind=StatementLine.Kind.ADJUSTMENT,
        description="Late telemetry",
        net=Decimal("0.00"),
        corrects_line=line,
    )
    return draft


def test_lines_render_as_the_serializer_renders_them(draft_lines):
    lines = draft_lines.lines.order_by("position")
    fast = rows_data(
        StatementLineSerializer, lines.values_list(*row_sources(StatementLineSerializer))
    )
    slow = StatementLineSerializer(lines, many=True).data
    assert _json(fast) == _json(slow)
    assert fast[1]["gpu_id"] is None
    assert fast[1]["availability"] is None
    assert fast[0]["busy_gpu_hours"] == "0.000001"
    assert fast[0]["starts_at"] == "2026-02-03T04:05:06.789000Z"


def test_the_statement_detail_is_the_serializers_document(world):
    statement = world.a.statement
    response = client_for(world.keys["owner_a"]).get(f"/api/v1/statements/{statement.pk}")
    assert response.status_code == 200
    expected = StatementDetailSerializer(statement, context=_cited_texts()).data
    assert response.content == _json(expected)


def test_a_basis_renders_as_its_own_serializer_renders_it(world):
    """Every statement's basis comes from one shared ``BasisSerializer``: the same bytes as a
    fresh one per statement, whatever was rendered before (published or draft)."""
    published = world.a.statement
    draft = Statement.objects.get(pk=published.pk)
    draft.status = Statement.Status.DRAFT
    shared = StatementSerializer(context={"disclosure_texts": {}})
    for statement in (published, draft, world.b.statement, published):
        fresh = BasisSerializer(statement_basis(statement)).data
        assert _json(shared.get_basis(statement)) == _json(fresh)
    assert shared.get_basis(draft)["finality"] == "preliminary"


def test_series_points_render_as_the_serializer_renders_them():
    points = [
        SeriesPoint(
            start=dt.datetime(2026, 3, 1, tzinfo=UTC),
            end=dt.datetime(2026, 3, 1, 1, tzinfo=UTC),
            held_s=3_600,
            in_service_s=3_600,
            up_s=3_000,
            down_s=600,
            maintenance_s=0,
            no_data_s=0,
            availability=Decimal("0.833333"),
            utilization=Decimal("0.421000"),
            busy_gpu_hours=Decimal("0.350833"),
            energy_kwh=Decimal("0.700000"),
        ),
        SeriesPoint(
            start=dt.datetime(2026, 3, 1, 1, tzinfo=UTC),
            end=dt.datetime(2026, 3, 1, 2, tzinfo=UTC),
            held_s=0,
            in_service_s=0,
            up_s=0,
            down_s=0,
            maintenance_s=0,
            no_data_s=0,
            availability=None,
            utilization=None,
            busy_gpu_hours=Decimal("0.000000"),
            energy_kwh=Decimal("0.000000"),
        ),
    ]
    sources = row_sources(SeriesPointSerializer)
    fast = rows_data(SeriesPointSerializer, ([getattr(p, s) for s in sources] for p in points))
    slow = SeriesPointSerializer(points, many=True).data
    assert _json(fast) == _json(slow)
    assert fast[1]["availability"] is None
    assert fast[1]["energy_kwh"] == "0.000000"


def test_the_gpu_list_is_the_detail_documents_of_its_gpus(world, bob):
    """The list renders rows itself (``gpus_data``); each GPU must read exactly as its detail
    (``GpuSerializer``): placed or not, with or without telemetry, shared or no longer held."""
    f = s.fleet("lon1")
    shared = s.gpu(f, "SN-SHARED", slot=0)
    s.own(shared, world.a.owner, 6_000, s.EPOCH)
    s.own(shared, world.b.owner, 4_000, s.EPOCH)
    gone = s.gpu(f, "SN-GONE", slot=1)
    Placement.objects.filter(gpu=gone).update(valid_to=NOW - dt.timedelta(days=1))
    s.own(gone, world.a.owner, 10_000, s.EPOCH, NOW - dt.timedelta(days=3))
    # SN-FRA1 is up, its last window observed to a minute ago; SN-GONE's telemetry ended
    # 10 minutes ago at :35 of its last minute, while its newest transition still says up.
    up_since = NOW - dt.timedelta(hours=1, microseconds=5)
    GpuStateTransition.objects.create(gpu=world.a.gpu, state="up", at=up_since)
    s.windows(world.a.gpu, NOW - dt.timedelta(hours=1), NOW - MINUTE, node=world.a.node)
    GpuStateTransition.objects.create(gpu=gone, state="up", at=NOW - dt.timedelta(hours=2))
    s.windows(
        gone,
        NOW - dt.timedelta(hours=2),
        NOW - dt.timedelta(minutes=10),
        node=f.node,
        change=lambda t, v: {**v, "observed": (0, 35)} if t == NOW - 11 * MINUTE else v,
    )
    GpuStateTransition.objects.create(gpu=shared, state="down", at=NOW + dt.timedelta(hours=1))
    accounts.partner_grant_create(
        owner=world.b.owner, partner=world.partner, scopes=ALL_SCOPES, by=bob
    )
    client = client_for(world.keys["partner_granted_a"])

    def detail(gpu_id):
        response = client.get(f"/api/v1/gpus/{gpu_id}")
        assert response.status_code == 200
        return response.content

    for query in ("", "?held=now", "?cluster=a", "?ordering=-created_at"):
        response = client.get(f"/api/v1/gpus{query}")
        assert response.status_code == 200, response.content
        ids = [g["id"] for g in response.json()["results"]]
        assert len(ids) == (4 if query in ("", "?ordering=-created_at") else 3)
        expected = b'"results":[' + b",".join(detail(i) for i in ids) + b"]}"
        assert response.content.endswith(expected)
    rows = {g["serial"]: g for g in client.get("/api/v1/gpus").json()["results"]}
    assert rows["SN-GONE"]["placement"] is None and rows["SN-GONE"]["holdings"] == []
    assert [h["share_bps"] for h in rows["SN-SHARED"]["holdings"]] != []
    assert len(rows["SN-SHARED"]["holdings"]) == 2
    assert rows["SN-FRA1"]["telemetry_state"] == "up"
    assert rows["SN-FRA1"]["telemetry_state_since"] == "2026-03-15T10:59:59.999995Z"
    assert rows["SN-FRA1"]["telemetry_last_seen_at"] == "2026-03-15T11:59:00Z"
    assert rows["SN-GONE"]["telemetry_state"] == "no_data"
    assert rows["SN-GONE"]["telemetry_state_since"] == "2026-03-15T11:49:35Z"
    assert rows["SN-GONE"]["telemetry_last_seen_at"] == "2026-03-15T11:49:35Z"
    assert rows["SN-SHARED"]["telemetry_state"] is None  # its transition is still ahead
    assert rows["SN-SHARED"]["telemetry_last_seen_at"] is None

    # Cursor pages over rows: every GPU once, in order.
    seen, path = [], "/api/v1/gpus?limit=1"
    while path:
        page = client.get(path).json()
        seen += [g["serial"] for g in page["results"]]
        path = page["next"]
    assert seen == sorted(rows)


def test_a_statement_reads_the_same_from_its_stored_lines(world, alice):
    """The lines of a published statement are rendered once and kept in the cache (and the
    text of its disclosure in the process): the next request reads the same bytes with two
    queries fewer, pretty-printing still works, and the
    access check still runs on every request."""
    statement = world.a.statement
    path = f"/api/v1/statements/{statement.pk}"
    client = client_for(world.keys["partner_granted_a"])
    client.get("/api/v1/owners")  # the key's last use is recorded once a minute
    counts, bodies = [], []
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path)
        assert response.status_code == 200
        counts.append(len(queries))
        bodies.append(response.content)
    assert bodies[0] == bodies[1]
    # The key with its grants and the statement; the first time also its disclosure's text
    # and its lines, both kept after that.
    assert counts == [4, 2]
    expected = StatementDetailSerializer(statement, context=_cited_texts()).data
    assert bodies[1] == _json(expected)
    pretty = client.get(path, HTTP_ACCEPT="application/json; indent=2")
    assert pretty.content == JSONRenderer().render(expected, "application/json; indent=2", {})
    assert pretty.content != bodies[1]

    grant = PartnerGrant.objects.get(
        owner=world.a.owner, partner=world.partner, revoked_at__isnull=True
    )
    accounts.partner_grant_revoke(grant=grant, by=alice)
    assert client.get(path).status_code == 404


@pytest.mark.parametrize(
    "value",
    ["0", "0E-6", "-0.000001", "1E+2", "123.4560000", "1.5E-7", "0.8333335", "-123.123456"],
)
def test_a_decimal_renders_as_drf_renders_it(value):
    """The fast text of a value already at the field's scale, DRF's quantize otherwise."""
    field = SeriesPointSerializer().fields["availability"]
    (convert,) = [
        c for name, _, c in _plain_fields(SeriesPointSerializer) if name == "availability"
    ]
    assert convert(Decimal(value)) == field.to_representation(Decimal(value))


def test_disclosure_texts_are_kept_only_for_published_versions_with_their_hash(db):
    """The texts statements cite are kept per (version, SHA-256) of a published disclosure:
    a draft (which may still change) is read every time, and a hash that is not the
    version's gives no text."""
    published = accounts.disclosure_standard_ensure()
    pair = (published.version, published.text_sha256)
    text = "Draft: not yet shown to owners."
    draft = Disclosure.objects.create(
        version="draft-1", text=text, text_sha256=hashlib.sha256(text.encode()).hexdigest()
    )
    draft_pair = (draft.version, draft.text_sha256)
    wrong = (published.version, "0" * 64)
    assert disclosure_texts_published({pair, draft_pair, wrong}) == {pair: published.text}
    with CaptureQueriesContext(connection) as queries:
        assert disclosure_texts_published({pair}) == {pair: published.text}
    assert len(queries) == 0
    with CaptureQueriesContext(connection) as queries:
        assert disclosure_texts_published({draft_pair}) == {}
    assert len(queries) == 1
