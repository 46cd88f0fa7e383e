import uuid

from telemetry.agent.uuid7 import Uuid7Factory, uuid7, uuid7_unix_ms


def test_version_variant_and_embedded_time():
    value = uuid7(1_795_255_200_123)
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert uuid7_unix_ms(value) == 1_795_255_200_123


def test_ids_from_one_factory_sort_in_creation_order():
    factory = Uuid7Factory()
    ids = [factory.new() for _ in range(5000)]  # many within one millisecond
    assert ids == sorted(ids, key=lambda u: u.int)
    assert len(set(ids)) == 5000
    assert all(u.version == 7 for u in ids)


def test_explicit_dates_order_by_date():
    early, late = uuid7(1_000), uuid7(2_000)
    assert early.int < late.int
