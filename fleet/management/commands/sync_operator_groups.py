from django.core.management.base import BaseCommand

from fleet.services.access import operator_groups_sync


class Command(BaseCommand):
    help = "Create or reset the operator groups (read-only, fleet, ownership, billing). Idempotent."

    def handle(self, *args: object, **options: object) -> None:
        groups = operator_groups_sync()
        for name, group in groups.items():
            self.stdout.write(f"{name}: {group.permissions.count()} permissions")
