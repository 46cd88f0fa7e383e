import os

from django.core.management.base import BaseCommand

from portal.demo import seed_demo


class Command(BaseCommand):
    help = "Load the demo data (idempotent). Password from STEWARD_DEMO_PASSWORD."

    def handle(self, *args: object, **options: object) -> None:
        password = os.environ.get("STEWARD_DEMO_PASSWORD", "steward-demo-2026")
        seeded = seed_demo(password=password)
        self.stdout.write(self.style.SUCCESS(f"Demo data ready: {seeded}"))
