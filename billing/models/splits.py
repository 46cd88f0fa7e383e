"""A cluster's pool as the last whole run of a closing period split it.

The pool of a cluster is split over all its GPUs (docs/accounting.md, rule 4), so one
owner's part depends on every other GPU's weight. A whole run of the close freezes each
split here — every GPU's weight and part — and recomputing one owner's drafts takes its
GPUs' parts from it, without measuring the cluster's other GPUs again: the owner's figures
then agree with those of the other owners' drafts written by that run. A split holds only
while what it was computed from holds for the owner's GPUs (see
``billing.services.computing``); starting a close removes the period's splits.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from billing.models.fields import money_field
from billing.models.periods import Period
from fleet.models import Cluster


class PoolSplit(models.Model):
    period = models.ForeignKey(Period, on_delete=models.CASCADE, related_name="+")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    currency = models.CharField(max_length=3)
    pool_basis = models.CharField(max_length=20)
    amount = money_field(help_text="The pool split, in this currency.")
    # As frozen in the statements (``str`` of the sum): up seconds, or busy seconds.
    total_weight = models.TextField()
    # GPU id → [weight, part in cents], both as the statements freeze them: every GPU of the
    # cluster in the period, whether or not an owner billed in this currency held it.
    parts = models.JSONField()
    computed_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["period", "cluster", "currency"], name="pool_split_once_per_currency"
            ),
        ]

    def __str__(self) -> str:
        return f"pool split of {self.cluster_id} in {self.currency}"
