"""Closing a period at the data level: figures by hand, resumable and idempotent runs,
refusals that change nothing."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection

from billing.models import Period, Statement, StatementLine
from billing.services.closing import period_close, period_close_run, period_close_start
from billing.services.periods import period_for_month
from billing.services.revenue import pool_add, rental_create
from fleet.models import Gpu
from tests.billing import scenario as s

pytestmark = pytest.mark.django_db
D = Decimal
UTC = dt.UTC
MARCH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))


@pytest.fixture
def transfer_world(oscar, disclosure):
    """The worked example of docs/accounting.md (``scenario.worked_example``), with its
    March period opened."""
    return {**s.worked_example(oscar), "period": period_for_month(year=2026, month=3)}


def test_a_transfer_mid_month_splits_every_figure_at_the_second(transfer_world, oscar):
    w = transfer_world
    run = period_close(period=w["period"], by=oscar)
    assert (run.written, run.unchanged) == (2, 0)
    alice = Statement.objects.get(owner=w["alice"])
    bob = Statement.objects.get(owner=w["bob"])
    (a,) = alice.lines.all()
    (b,) = bob.lines.all()
    # Alice's seconds: 9 d 12 h 30 s = 820,830 s; Bob's: 2,678,400 − 820,830 = 1,857,570 s.
    assert (a.up_s, b.up_s, a.no_data_s, b.no_data_s) == (820_830, 1_857_570, 0, 0)
    # Rental 744 h × 2.00 = 1,488.00 split 456.0166… / 1,031.9833…; the spare cent goes to
    # the larger remainder (Alice).
    assert (a.gross, b.gross) == (D("456.02"), D("1031.98"))
    # Hosting 100 × 820,830 / 2,678,400 = 30.646… ; Bob 69.353…
    assert (a.hosting_fee, b.hosting_fee) == (D("30.65"), D("69.35"))
    # Energy 0.01 kWh × 13,680.5 min = 136.805 kWh × 1.5 × 0.20 = 41.0415; Bob 309.595 kWh.
    assert (a.energy_kwh, b.energy_kwh) == (D("136.805000"), D("309.595000"))
    assert (a.power_cost, b.power_cost) == (D("41.04"), D("92.88"))
    assert (a.management_fee, b.management_fee) == (D("45.60"), D("103.20"))
    assert (a.net, b.net) == (D("338.73"), D("766.55"))
    assert (a.utilization, a.availability) == (D("0.500000"), D("1.000000"))
    assert (alice.lines_total, alice.closing_balance) == (D("338.73"), D("338.73"))
    assert alice.disclosure_version == "2026-01"
    assert alice.status == Statement.Status.DRAFT
    assert w["period"].statements.count() == 2
    assert Period.objects.get(pk=w["period"].pk).status == Period.Status.CLOSING


def _snapshot(period):
    return sorted(
        (
            str(st.owner_id),
            st.currency,
            st.content_sha256,
            st.closing_balance,
            tuple(st.lines.order_by("position").values_list("position", "gpu_id", "net")),
        )
        for st in Statement.objects.filter(period=period)
    )


def _crash_writing_statements_of(owner) -> None:
    """From now on the database fails every insert of ``owner``'s statements (an injected
    crash mid-run); None lifts it."""
    with connection.cursor() as cursor:
        if owner is None:
            cursor.execute(
                "DROP TRIGGER test_crash ON billing_statement; DROP FUNCTION test_crash()"
            )
            return
        cursor.execute(
            f"""
            CREATE FUNCTION test_crash() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'injected crash'; END $$;
            CREATE TRIGGER test_crash BEFORE INSERT ON billing_statement FOR EACH ROW
              WHEN (NEW.owner_id = '{owner.pk}') EXECUTE FUNCTION test_crash();
            """
        )


def test_a_run_that_crashes_midway_then_reruns_equals_a_clean_run(transfer_world, oscar):
    w = transfer_world
    period = period_close_start(period=w["period"], by=oscar)
    # The database fails writing Bob's lines: the statements written before stay, Bob's not.
    _crash_writing_statements_of(w["bob"])
    from billing.services import closing

    closing.WRITE_CHUNK, saved = 1, closing.WRITE_CHUNK
    try:
        with pytest.raises(DatabaseError, match="injected crash"):
            period_close_run(period=period)
    finally:
        closing.WRITE_CHUNK = saved
    written_before_crash = Statement.objects.filter(period=period).count()
    assert written_before_crash == (1 if str(w["alice"].pk) < str(w["bob"].pk) else 0)
    _crash_writing_statements_of(None)
    resumed = period_close_run(period=period)
    assert resumed.written + resumed.unchanged == 2
    after_resume = _snapshot(period)

    again = period_close_run(period=period)  # idempotent: nothing to write
    assert (again.written, again.unchanged) == (0, 2)
    for st in Statement.objects.filter(period=period):
        st.lines.all().delete()
        st.delete()
    clean = period_close_run(period=period)
    assert clean.written == 2
    assert _snapshot(period) == after_resume


def test_closing_with_unprocessed_telemetry_is_refused_and_changes_nothing(transfer_world, oscar):
    w = transfer_world
    s.batch_pending(w["fleet"].node, MARCH[1] + dt.timedelta(hours=2))
    with pytest.raises(ValidationError, match=r"not processed yet \(1 pending\)"):
        period_close(period=w["period"], by=oscar)
    assert Period.objects.get(pk=w["period"].pk).status == Period.Status.OPEN
    assert not Statement.objects.exists()
    assert not StatementLine.objects.exists()


def test_closing_while_rollups_await_their_derived_pass_is_refused(transfer_world, oscar):
    # A processed batch leaves a mark until the derived pass recomputes its GPU-hour: the
    # rollups are stale until then, and a statement must not be computed from them.
    w = transfer_world
    gpu = Gpu.objects.get(serial="SN-1")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO telemetry_derivedwork (gpu_id, hour, lo) VALUES (%s, %s, %s)",
            [gpu.pk, MARCH[0] + dt.timedelta(days=3), MARCH[0] + dt.timedelta(days=3)],
        )
    with pytest.raises(ValidationError, match=r"\(1 GPU-hours awaiting their rollups\)"):
        period_close(period=w["period"], by=oscar)
    assert Period.objects.get(pk=w["period"].pk).status == Period.Status.OPEN
    assert not Statement.objects.exists()


def test_maintenance_overlapping_an_operator_incident_at_the_data_level(oscar, disclosure):
    from fleet.models import Incident, IncidentCause, MaintenanceWindow

    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    alice = s.owner("Alice Compute Ltd")
    s.own(gpu, alice, 10_000, s.EPOCH)
    s.card(f, oscar, waive_hosting_in_operator_incidents=True)
    day = dt.datetime(2026, 3, 5, tzinfo=UTC)
    incident = (day + dt.timedelta(hours=11), day + dt.timedelta(hours=14))

    def down_in_incident(t, v):
        if incident[0] <= t < incident[1]:
            v.update(state="down", util=0.0)
        return v

    s.windows(
        gpu, MARCH[0] - dt.timedelta(minutes=1), MARCH[1], node=f.node, change=down_in_incident
    )
    s.rebuild(*MARCH)
    MaintenanceWindow.objects.create(
        node=f.node,
        title="BIOS",
        announced_at=day,
        starts_at=day + dt.timedelta(hours=10),
        ends_at=day + dt.timedelta(hours=12),
    )
    Incident.objects.create(
        gpu=gpu,
        title="XID 79",
        cause=IncidentCause.HARDWARE,
        started_at=incident[0],
        ended_at=incident[1],
    )
    rental_create(
        cluster=f.cluster,
        gpus=[gpu],
        starts_at=MARCH[0],
        ends_at=MARCH[1],
        rate_per_gpu_hour=D("1.00"),
        currency="EUR",
        customer_reference="R-1",
        by=oscar,
    )
    period_close(period=period_for_month(year=2026, month=3), by=oscar)
    (line,) = Statement.objects.get(owner=alice).lines.all()
    # Maintenance wins 10–12 (2 h); down is the rest of the incident, 12–14 (2 h).
    assert (line.maintenance_s, line.down_s, line.no_data_s) == (7200, 7200, 0)
    assert line.up_s == 2_678_400 - 4 * 3600
    # Availability = 2,664,000 / (2,678,400 − 7,200) = 0.997304…
    assert line.availability == D("0.997305")
    # The rental earns on up seconds only: 740 h × 1.00; hosting waived for the incident's
    # 3 h (the maintenance overlap included): 100 × 2,667,600 / 2,678,400 = 99.5967… → 99.60.
    assert (line.gross, line.hosting_fee) == (D("740.00"), D("99.60"))


def test_a_pool_over_a_cluster_with_no_up_time_is_refused_clearly(oscar, disclosure):
    """No GPU of the cluster was up in March (no telemetry): the pool has nothing to be split
    by, and the close says so instead of failing inside the arithmetic."""
    f = s.fleet()
    gpu = s.gpu(f, "SN-1", slot=0)
    s.own(gpu, s.owner("Alice Compute Ltd"), 10_000, s.EPOCH)
    s.card(f, oscar)
    period = period_for_month(year=2026, month=3)
    pool_add(
        cluster=f.cluster,
        period=period,
        amount=D("1000.00"),
        currency="EUR",
        description="March pool",
        by=oscar,
    )
    with pytest.raises(ValidationError) as refused:
        period_close(period=period, by=oscar)
    assert refused.value.message_dict["pool"] == [
        f"The EUR 1000.00 pool of cluster {f.cluster} in {period} cannot be split: no GPU of "
        "the cluster has any up time in the period to split it by. Correct or remove the pool "
        "entry."
    ]
    assert not Statement.objects.exists()
    period.refresh_from_db()
    assert period.status == Period.Status.OPEN


@pytest.mark.django_db(transaction=True)
def test_day_sums_on_a_second_connection_give_the_same_statements(oscar, disclosure, monkeypatch):
    # Outside a transaction the close sums the rollups per day on a connection of its own,
    # in a thread, while it loads facts; inside one it asks on its own connection. With every
    # whole day's cells taking those sums (DAY_CELLS = 0), both must give the same drafts —
    # the worked example's figures by hand included.
    from django.db import transaction

    from billing.selectors import usage
    from billing.services.computing import statements_compute

    monkeypatch.setattr(usage, "DAY_CELLS", 0)
    started = []
    start = usage.DaySums.start

    def recorded(window):
        sums = start(window)
        started.append(sums)
        return sums

    monkeypatch.setattr(usage.DaySums, "start", staticmethod(recorded))
    w = s.worked_example(oscar)
    period = period_for_month(year=2026, month=3)
    threaded = statements_compute(period=period, disclosure=disclosure)
    with transaction.atomic():
        inline = statements_compute(period=period, disclosure=disclosure)
    assert started[0] is not None and started[0].days[0] == MARCH[0]
    assert len(started[0].days) == 31 and started[1] is None
    assert {k: (d.sha256, d.frozen) for k, d in threaded.items()} == {
        k: (d.sha256, d.frozen) for k, d in inline.items()
    }
    nets = {k[0]: d.content["lines_total"] for k, d in threaded.items()}
    assert nets == {str(w["alice"].pk): "338.73", str(w["bob"].pk): "766.55"}
    # Every whole day of the month took its sums from the day query: 31 cells with no
    # partial hour except the transfer's day, which is cut at 12:00:30.
    cells = [c for d in threaded.values() for g in d.frozen["gpus"] for c in g["cells"]]
    assert len(cells) == 2 * 32


def test_frozen_inputs_are_written_as_the_text_computed(transfer_world, oscar, disclosure):
    # The close writes each draft's frozen inputs as the JSON text it built (never a dict
    # serialised again): that text is json.dumps of the frozen inputs, and what is stored.
    import json

    from billing.services.computing import statements_compute

    w = transfer_world
    period_close(period=w["period"], by=oscar)
    drafts = statements_compute(period=w["period"], disclosure=disclosure)
    assert len(drafts) == 2
    for (owner, currency), draft in drafts.items():
        assert json.dumps(draft.frozen) == draft.frozen_json
        stored = Statement.objects.get(owner_id=owner, currency=currency)
        assert stored.frozen_inputs == draft.frozen
        # Kept as ``json``, byte for byte (billing migration 0011), and read back the same
        # whichever way the ORM reads it.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT frozen_inputs::text, pg_typeof(frozen_inputs)::text"
                " FROM billing_statement WHERE id = %s",
                [stored.pk],
            )
            assert cursor.fetchone() == (draft.frozen_json, "json")
        values = Statement.objects.filter(pk=stored.pk).values_list("frozen_inputs", flat=True)
        assert values.get() == draft.frozen
        (gpu,) = draft.frozen["gpus"]
        assert len(gpu["cells"]) == 32  # 31 days, the transfer's day cut at 12:00:30


@pytest.mark.django_db(transaction=True)
def test_chunks_written_on_connections_of_their_own_equal_one_by_one(
    oscar, disclosure, monkeypatch
):
    # Outside a transaction the chunks' transactions run on WRITERS threads, each with its
    # own connection; inside one, one by one on the caller's. Same rows either way, a
    # failing chunk's error reaches the caller, and a rerun after it finishes the job.
    import threading

    from django.db import transaction

    from billing.services import closing

    w = s.worked_example(oscar)
    period = period_close_start(period=period_for_month(year=2026, month=3), by=oscar)
    monkeypatch.setattr(closing, "WRITE_CHUNK", 1)
    threads = []
    write_chunk = closing._write_chunk

    def recorded(*args):
        threads.append(threading.current_thread().name)
        return write_chunk(*args)

    monkeypatch.setattr(closing, "_write_chunk", recorded)

    def stored():
        return sorted(
            (*row, Statement.objects.get(owner_id=row[0], period=period).frozen_inputs)
            for row in _snapshot(period)
        )

    _crash_writing_statements_of(w["bob"])
    with pytest.raises(DatabaseError, match="injected crash"):
        period_close_run(period=period)
    assert threads and all(name.startswith("billing-writer-") for name in threads)
    _crash_writing_statements_of(None)
    resumed = period_close_run(period=period)
    assert resumed.written + resumed.unchanged == 2
    parallel = stored()
    assert {r[0]: r[3] for r in parallel} == {
        str(w["alice"].pk): D("338.73"),
        str(w["bob"].pk): D("766.55"),
    }

    StatementLine.objects.all().delete()
    Statement.objects.all().delete()
    threads.clear()
    with transaction.atomic():
        inline = period_close_run(period=period)
    assert inline.written == 2 and threads == [threading.main_thread().name] * 2
    assert stored() == parallel
