import time
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import User
from billing.services.periods import period_for_month
from portal.demo_billing import demo_backlog, demo_period_publish


def _previous_month(now: datetime) -> tuple[int, int]:
    return (now.year, now.month - 1) if now.month > 1 else (now.year - 1, 12)


class Command(BaseCommand):
    help = (
        "Demo: once the simulated nodes' telemetry for a month is processed, enter the demo "
        "rate cards and revenue, close the month and publish its statements (oscar requests, "
        "olga approves). Default month: the previous one. Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--month", help="YYYY-MM (default: the previous month, UTC)")
        parser.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="wait up to this long for the telemetry backlog, printing progress",
        )
        parser.add_argument("--every", type=float, default=10.0, help="seconds between reports")
        parser.add_argument(
            "--nodes",
            nargs="+",
            metavar="HOSTNAME",
            help="the simulated nodes whose backfill to wait for (default: all demo nodes)",
        )

    def handle(self, *args: object, **options: object) -> None:
        began = time.monotonic()
        month = options.get("month")
        if isinstance(month, str):
            try:
                year, number = (int(part) for part in month.split("-"))
            except ValueError as exc:
                raise CommandError(f"--month {month!r} is not YYYY-MM.") from exc
        else:
            year, number = _previous_month(datetime.now(UTC))
        try:
            period = period_for_month(year=year, month=number)
            requester = User.objects.get(email__iexact="oscar@steward.example")
            approver = User.objects.get(email__iexact="olga@steward.example")
        except (ValidationError, User.DoesNotExist) as exc:
            raise CommandError(f"{exc} (run `manage.py seed_demo` first)") from exc
        label = f"{period.start:%B %Y}"
        wait = options.get("wait")
        wait = float(wait) if isinstance(wait, int | float) else 0.0
        every = options.get("every")
        every = float(every) if isinstance(every, int | float) and every > 0 else 10.0
        reported = 0.0
        nodes = options.get("nodes")
        hostnames = nodes if isinstance(nodes, list) else None
        while True:
            backlog = demo_backlog(period=period, hostnames=hostnames)
            if period.status != period.Status.OPEN or backlog.ready:
                try:
                    statements = demo_period_publish(
                        period=period, requester=requester, approver=approver
                    )
                    break
                except ValidationError as exc:  # telemetry arrived between the two reads
                    problem = "; ".join(exc.messages)
            else:
                problem = backlog.describe()
            elapsed = time.monotonic() - began
            if elapsed >= wait:
                raise CommandError(f"{label} cannot be closed yet: {problem}")
            if elapsed - reported >= every or reported == 0.0:
                self.stdout.write(f"demo: {label} telemetry: {problem} ({elapsed:.0f} s)")
                reported = elapsed or 1e-9
            time.sleep(min(2.0, every))
        totals = ", ".join(
            f"{s.owner.legal_name}: net {s.currency} {s.lines_total}" for s in statements
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"demo: {label} is closed and its {len(statements)} statements are published "
                f"({totals}; requested by oscar, approved by olga) "
                f"{time.monotonic() - began:.0f} s after waiting began."
            )
        )
