import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser

from accounts.models import User
from portal.demo import demo_agents_prepare, seed_demo


class Command(BaseCommand):
    help = (
        "Load the demo data (idempotent). Password from STEWARD_DEMO_PASSWORD. With "
        "--agents-dir, also write the simulated nodes' scenarios and an agents.json manifest."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agents-dir", type=Path, help="where the demo agents keep state")

    def handle(self, *args: object, **options: object) -> None:
        password = os.environ.get("STEWARD_DEMO_PASSWORD", "steward-demo-2026")
        seeded = seed_demo(password=password)
        self.stdout.write(self.style.SUCCESS(f"Demo data ready: {seeded}"))
        agents_dir = options.get("agents_dir")
        if isinstance(agents_dir, Path):
            operator = seeded["operator"]
            manifest = demo_agents_prepare(
                agents_dir=agents_dir, by=operator if isinstance(operator, User) else None
            )
            self.stdout.write(f"{len(manifest)} simulated nodes prepared in {agents_dir}")
