"""Two operators selling the same GPU at once: the row lock lets exactly one through."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from fleet.models import Ownership
from fleet.services.ownership import ownership_sell
from tests.fleet.conftest import T


@pytest.mark.django_db(transaction=True)
def test_concurrent_sales_of_one_gpu_cannot_over_allocate(gpu, alice_owner, bob_owner, oscar):
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def sell(owner) -> None:
        try:
            barrier.wait(timeout=10)
            ownership_sell(
                gpus=[gpu], owner=owner, share_bps=6000, at=T(2), reason="race", by=oscar
            )
            outcomes.append("sold")
        except ValidationError as error:
            outcomes.append(error.message_dict["share_bps"][0].split(";")[0])
        finally:
            connection.close()

    threads = [threading.Thread(target=sell, args=(o,)) for o in (alice_owner, bob_owner)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == [
        "GPU SN0001: only 4000 bps are unsold at 2026-03-02T00:00:00Z",
        "sold",
    ]
    assert list(Ownership.objects.values_list("share_bps", flat=True)) == [6000]
