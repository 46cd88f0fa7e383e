"""Demo data: the people of the story. Idempotent, so `make demo` can run it every time.

oscar operates (olga too: a billing officer, the second pair of eyes for publishing),
alice (a company) and bob (a person) own GPUs, carol integrates as a partner.
The fleet: one site with two clusters of four nodes, eight GPUs each; alice owns sixteen GPUs
whole, bob half of eight others; alice sold two of hers to bob in the past; one maintenance
window is announced and one incident happened. Later parts of the product add their own demo
data here (telemetry, statements).
"""

from __future__ import annotations

import json
from base64 import b32encode
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import transaction
from django.utils import timezone
from django_otp.oath import hotp
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import services as accounts
from accounts.models import Membership, Owner, Partner, User
from fleet.models import Cluster, Gpu, GpuModel, IncidentCause, Node, Site
from fleet.services import access, importing, lifecycle, operations, ownership
from portal.demo_nodes import DEMO_NODES
from telemetry.models import NodeCredential
from telemetry.services.enrolment import bootstrap_token_issue

# oscar's authenticator key in the demo (20 bytes, hex): add it to an app, or print the code.
DEMO_TOTP_KEY_HEX = b"steward-demo-totp-20".hex()
DEMO_TOTP_SECRET = b32encode(bytes.fromhex(DEMO_TOTP_KEY_HEX)).decode("ascii")
DEMO_SITE = "fra1"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


def demo_totp_code(*, at: datetime | None = None) -> str:
    """The code oscar's demo authenticator shows at ``at`` (default: now); 30-s steps."""
    counter = int((at or timezone.now()).timestamp()) // 30
    return f"{hotp(bytes.fromhex(DEMO_TOTP_KEY_HEX), counter, digits=6):06d}"


def demo_otpauth_uri() -> str:
    return (
        f"otpauth://totp/Steward:oscar%40steward.example?secret={DEMO_TOTP_SECRET}"
        "&issuer=Steward&digits=6&period=30"
    )


def _user(
    email: str, password: str, full_name: str, *, staff: bool = False, superuser: bool | None = None
) -> User:
    existing = User.objects.filter(email__iexact=email).first()
    if existing is not None:
        return existing
    return accounts.user_create(
        email=email,
        password=password,
        full_name=full_name,
        is_staff=staff,
        is_superuser=staff if superuser is None else superuser,
    )


def _owner(
    legal_name: str, *, kind: str, email: str, currency: str, tz: str, address: str
) -> Owner:
    existing = Owner.objects.filter(legal_name=legal_name).first()
    if existing is not None:
        return existing
    return accounts.owner_create(
        kind=kind,
        legal_name=legal_name,
        contact_email=email,
        billing_currency=currency,
        time_zone=tz,
        postal_address=address,
    )


@transaction.atomic
def seed_demo(*, password: str) -> dict[str, object]:
    oscar = _user("oscar@steward.example", password, "Oscar Operator", staff=True)
    alice = _user("alice@owner.example", password, "Alice Kim")
    bob = _user("bob@owner.example", password, "Bob Chen")
    carol = _user("carol@partner.example", password, "Carol Diaz")

    alice_co = _owner(
        "Alice Compute Ltd",
        kind=Owner.Kind.COMPANY,
        email="billing@alice.example",
        currency="EUR",
        tz="Europe/Berlin",
        address="Alice Compute Ltd\nFriedrichstraße 12\n10117 Berlin\nGermany",
    )
    bob_owner = _owner(
        "Bob Chen",
        kind=Owner.Kind.PERSON,
        email="bob@owner.example",
        currency="USD",
        tz="America/New_York",
        address="Bob Chen\n200 Hudson Street, Apt 4B\nNew York, NY 10013\nUSA",
    )
    accounts.membership_grant(user=alice, owner=alice_co, role=Membership.Role.ADMIN)
    accounts.membership_grant(user=bob, owner=bob_owner, role=Membership.Role.ADMIN)

    partner = Partner.objects.filter(name="Carol Marketplace").first() or accounts.partner_create(
        name="Carol Marketplace", contact_email="api@partner.example"
    )
    accounts.partner_member_add(user=carol, partner=partner)

    groups = access.operator_groups_sync()
    # A second operator: publishing a statement takes one to request and another to approve.
    olga = _user("olga@steward.example", password, "Olga Officer", staff=True, superuser=False)
    olga.groups.add(groups[access.BILLING_OFFICERS], groups[access.READ_ONLY_OPERATORS])
    # Owners must acknowledge the current risk disclosure before they see earnings.
    accounts.disclosure_standard_ensure()
    for operator in (oscar, olga):
        if not TOTPDevice.objects.filter(user=operator, confirmed=True).exists():
            accounts.totp_device_provision(user=operator, key_hex=DEMO_TOTP_KEY_HEX, by=None)
    gpus = _fleet(operator=oscar, alice=alice_co, bob=bob_owner)
    return {
        "operator": oscar,
        "second_operator": olga,
        "owners": [alice_co, bob_owner],
        "partner": partner,
        "gpus": gpus,
        "operator_totp_secret": DEMO_TOTP_SECRET,
    }


def _fleet(*, operator: User, alice: Owner, bob: Owner) -> int:
    """Seeds the fleet once (skipped when the demo site exists); returns the GPU count."""
    if Site.objects.filter(code=DEMO_SITE).exists():
        return Gpu.objects.count()
    now = timezone.now().replace(microsecond=0)
    # Dated relative to today, so the history is always in the past and recent.
    start = (now - timedelta(days=150)).replace(hour=8, minute=0, second=0)
    site = Site.objects.create(
        code=DEMO_SITE, name="Frankfurt 1", country="DE", time_zone="Europe/Berlin"
    )
    GpuModel.objects.get_or_create(name=H100, defaults={"memory_mib": 81559, "tdp_w": 700})
    GpuModel.objects.get_or_create(name=H200, defaults={"memory_mib": 143771, "tdp_w": 700})
    lines = ["serial,nvml_uuid,model,node,slot,received_at"]
    clusters = {
        code: Cluster.objects.create(site=site, code=code, name=f"Cluster {code.upper()}")
        for code in sorted({node.cluster for node in DEMO_NODES})
    }
    for spec in DEMO_NODES:
        node = Node.objects.create(cluster=clusters[spec.cluster], hostname=spec.hostname)
        # The identities the node's simulated agent will report (see portal/demo_nodes.py).
        for slot, nvml_uuid, serial, model in spec.scenario().identities():
            lines.append(f"{serial},{nvml_uuid},{model},{node.hostname},{slot},{start.isoformat()}")
    gpus = importing.gpu_import_commit(
        text="\n".join(lines) + "\n", by=operator, reason="Demo: first delivery."
    )
    lifecycle.gpus_transition(
        gpus=gpus, state="burn_in", at=start + timedelta(days=1), by=operator, reason="Racked."
    )
    lifecycle.gpus_transition(
        gpus=gpus, state="in_service", at=start + timedelta(days=4), by=operator, reason="Passed."
    )
    sold = start + timedelta(days=4)
    in_cluster = {
        code: {spec.hostname for spec in DEMO_NODES if spec.cluster == code} for code in clusters
    }
    # Where each GPU sits, to pick them by node and slot: (hostname, slot).
    placed = {
        pk: (hostname, slot)
        for pk, hostname, slot in Gpu.objects.filter(placements__valid_to__isnull=True).values_list(
            "pk", "placements__node__hostname", "placements__slot"
        )
    }
    cluster_a = sorted(
        (g for g in gpus if placed[g.pk][0] in in_cluster["a"]), key=lambda g: placed[g.pk]
    )
    cluster_b = sorted(
        (g for g in gpus if placed[g.pk][0] in in_cluster["b"]), key=lambda g: placed[g.pk]
    )
    ownership.ownership_sell(
        gpus=cluster_a[:16],
        owner=alice,
        share_bps=10_000,
        at=sold,
        by=operator,
        reason="Demo: order A-1001, sixteen H100s.",
    )
    ownership.ownership_sell(
        gpus=cluster_b[:8],
        owner=bob,
        share_bps=5_000,
        at=sold,
        by=operator,
        reason="Demo: order B-2002, half of eight H200s.",
    )
    ownership.ownership_transfer(
        gpus=cluster_a[14:16],
        from_owner=alice,
        to=[ownership.ShareTo(bob, 10_000)],
        at=start + timedelta(days=90, hours=4, minutes=30),
        by=operator,
        reason="Demo: Alice sold two GPUs to Bob (contract C-17).",
    )
    _last_month_story(operator=operator, alice=alice, bob=bob, cluster_a=cluster_a, now=now)
    node_b2 = Node.objects.get(hostname="fra1-b-n02")
    incident = operations.incident_open(
        scope=node_b2,
        title="Fan failure on fra1-b-n02",
        cause=IncidentCause.COOLING,
        started_at=now - timedelta(days=10, hours=3),
        by=operator,
        notes_for_owners="A chassis fan failed; the node was drained and the fan replaced.",
    )
    operations.incident_close(incident=incident, ended_at=now - timedelta(days=10), by=operator)
    operations.maintenance_schedule(
        scope=Cluster.objects.get(site=site, code="a"),
        title="PDU firmware update",
        description="Cluster A is drained in two halves; each GPU is out for at most 2 hours.",
        announced_at=now,
        starts_at=(now + timedelta(days=7)).replace(hour=2, minute=0, second=0),
        ends_at=(now + timedelta(days=7)).replace(hour=6, minute=0, second=0),
        by=operator,
    )
    return len(gpus)


def _last_month_story(
    *, operator: User, alice: Owner, bob: Owner, cluster_a: list[Gpu], now: datetime
) -> None:
    """What the month the demo closes and publishes shows on the owners' statements, besides
    rentals (cluster A) and a pool (cluster B): an incident on one of Alice's GPUs (its agent
    reports the card lost over the same hours, portal/demo_nodes.py), a maintenance window on
    her node, a GPU of Bob's silent for six hours, and a sale from Alice to Bob at a second."""
    month = datetime(now.year - (now.month == 1), (now.month - 2) % 12 + 1, 1, tzinfo=UTC)
    lost_gpu = cluster_a[2]  # fra1-a-n01, slot 2: the scenario's gpu_lost / recover
    # The sale first: the seeding is one transaction, and GPUs are locked before incidents.
    ownership.ownership_transfer(
        gpus=cluster_a[12:14],
        from_owner=alice,
        to=[ownership.ShareTo(bob, 10_000)],
        at=month + timedelta(days=19, hours=12, seconds=30),
        by=operator,
        reason="Demo: Alice sold two more GPUs to Bob (contract C-23), at 12:00:30.",
    )
    incident = operations.incident_open(
        scope=lost_gpu,
        title="GPU fell off the bus (Xid 79)",
        cause=IncidentCause.HARDWARE,
        started_at=month + timedelta(days=8, hours=14),
        by=operator,
        notes_for_owners="The card dropped off the PCIe bus; it was reseated and tested.",
    )
    operations.incident_close(
        incident=incident, ended_at=month + timedelta(days=8, hours=17, minutes=20), by=operator
    )
    operations.maintenance_schedule(
        scope=Node.objects.get(hostname="fra1-a-n01"),
        title="BIOS update on fra1-a-n01",
        description="The node is drained, updated and returned to service.",
        announced_at=month + timedelta(days=10),
        starts_at=month + timedelta(days=14, hours=2),
        ends_at=month + timedelta(days=14, hours=4),
        by=operator,
    )


def demo_agents_prepare(*, agents_dir: Path, by: User | None = None) -> list[dict[str, str | None]]:
    """Writes each simulated node's scenario and a manifest for `config.demo` to start agents.

    A node whose agent has no key file yet gets a fresh one-time bootstrap token; an agent that
    enrolled on an earlier run keeps its key and needs none.
    """
    agents_dir.mkdir(parents=True, exist_ok=True)
    nodes = {
        node.hostname: node
        for node in Node.objects.filter(hostname__in=[spec.hostname for spec in DEMO_NODES])
    }
    enrolled = set(
        NodeCredential.objects.filter(node__in=nodes.values(), revoked_at__isnull=True).values_list(
            "node__hostname", flat=True
        )
    )
    manifest: list[dict[str, str | None]] = []
    for spec in DEMO_NODES:
        scenario = agents_dir / f"{spec.hostname}.toml"
        scenario.write_text(spec.scenario_toml(), encoding="utf-8")
        key_file = agents_dir / f"{spec.hostname}.key"
        token = None
        if not (key_file.exists() and spec.hostname in enrolled):
            key_file.unlink(missing_ok=True)
            token = bootstrap_token_issue(node=nodes[spec.hostname], by=by)
        manifest.append(
            {
                "hostname": spec.hostname,
                "scenario": str(scenario),
                "key_file": str(key_file),
                "spool": str(agents_dir / f"{spec.hostname}.spool"),
                "bootstrap_token": token,
            }
        )
    (agents_dir / "agents.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest
