"""Billing: what each cluster earned and cost, and what each owner is owed."""

from billing.models.ledger import Adjustment, Payout
from billing.models.periods import Period
from billing.models.revenue import ClusterBilling, PoolRevenue, RateCard, Rental, RentalGpu
from billing.models.splits import PoolSplit
from billing.models.statements import Statement, StatementLine

__all__ = [
    "Adjustment",
    "ClusterBilling",
    "Payout",
    "Period",
    "PoolRevenue",
    "PoolSplit",
    "RateCard",
    "Rental",
    "RentalGpu",
    "Statement",
    "StatementLine",
]
