"""Bulk import of GPUs from CSV: a preview with every row's errors, then an all-or-nothing
commit that writes GPUs, their arrival and their placement in bulk, with bulk audit entries.

Columns (header row required, order free): ``serial``, ``nvml_uuid``, ``model`` (catalog name),
optional ``node`` (hostname) and ``slot`` (NVML index, required with a node), optional
``received_at`` (ISO 8601 with an offset, e.g. ``2026-03-01T09:00:00Z``; default: now).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import User
from accounts.services import AuditEvent, audit_log
from core.instants import iso_z
from fleet.models import Gpu, GpuModel, LifecycleState, LifecycleTransition, Node, Placement
from fleet.services._common import database_rules, snapshot

REQUIRED_COLUMNS = ("serial", "nvml_uuid", "model")
OPTIONAL_COLUMNS = ("node", "slot", "received_at")
MAX_ROWS = 10_000


@dataclass
class ImportRow:
    """One data line of the file (``line`` counts the header as line 1)."""

    line: int
    serial: str
    nvml_uuid: str
    model_name: str
    hostname: str
    slot_text: str
    received_text: str
    errors: list[str] = field(default_factory=list)
    model: GpuModel | None = None
    node: Node | None = None
    slot: int | None = None
    received_at: datetime | None = None

    @property
    def arrival(self) -> datetime:
        """When the GPU arrived; only for rows without errors."""
        if self.received_at is None:
            raise ValueError(f"line {self.line} has errors: {self.errors}")
        return self.received_at


@dataclass
class ImportPreview:
    rows: list[ImportRow]
    file_errors: list[str]

    @property
    def ok(self) -> bool:
        return not self.file_errors and all(not row.errors for row in self.rows)

    @property
    def error_count(self) -> int:
        return len(self.file_errors) + sum(len(row.errors) for row in self.rows)

    def error_lines(self) -> list[str]:
        """Every problem as one line naming the row and field."""
        return [*self.file_errors] + [
            f"Line {row.line}: {error}" for row in self.rows for error in row.errors
        ]


def gpu_import_preview(*, text: str, now: datetime | None = None) -> ImportPreview:
    """Parses and checks the file against the database without writing anything."""
    default_received = (now or timezone.now()).astimezone(UTC).replace(microsecond=0)
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = [name.strip().lower() for name in reader.fieldnames or []]
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    unknown = [name for name in header if name not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    file_errors: list[str] = []
    if not header:
        return ImportPreview(rows=[], file_errors=["The file is empty; it needs a header row."])
    if missing:
        file_errors.append(f"Header: missing column(s) {', '.join(missing)}.")
    if unknown:
        file_errors.append(
            f"Header: unknown column(s) {', '.join(unknown)}; "
            f"known: {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}."
        )
    if file_errors:
        return ImportPreview(rows=[], file_errors=file_errors)
    reader.fieldnames = header
    rows: list[ImportRow] = []
    for number, record in enumerate(reader, start=2):
        if len(rows) >= MAX_ROWS:
            return ImportPreview(
                rows=[], file_errors=[f"The file has more than {MAX_ROWS} rows; split it."]
            )
        if None in record:
            rows.append(_row(number, record))
            rows[-1].errors.append("has more fields than the header.")
            continue
        if not any((value or "").strip() for value in record.values()):
            continue  # blank line
        rows.append(_row(number, record))
    if not rows:
        return ImportPreview(rows=[], file_errors=["The file has a header but no GPUs."])
    _check(rows, default_received)
    return ImportPreview(rows=rows, file_errors=[])


def _row(number: int, record: dict[str | None, object]) -> ImportRow:
    def cell(name: str) -> str:
        value = record.get(name)
        return value.strip() if isinstance(value, str) else ""

    return ImportRow(
        line=number,
        serial=cell("serial"),
        nvml_uuid=cell("nvml_uuid"),
        model_name=cell("model"),
        hostname=cell("node"),
        slot_text=cell("slot"),
        received_text=cell("received_at"),
    )


def _check(rows: list[ImportRow], default_received: datetime) -> None:
    models = {m.name: m for m in GpuModel.objects.all()}
    hostnames = {row.hostname for row in rows if row.hostname}
    nodes = {n.hostname: n for n in Node.objects.filter(hostname__in=hostnames)}
    serials = Counter(row.serial for row in rows if row.serial)
    uuids = Counter(row.nvml_uuid for row in rows if row.nvml_uuid)
    known = Gpu.objects.filter(
        Q(serial__in=list(serials)) | Q(nvml_uuid__in=list(uuids))
    ).values_list("serial", "nvml_uuid")
    known_serials = {s for s, _ in known}
    known_uuids = {u for _, u in known}
    first_line: dict[tuple[str, str], int] = {}
    for row in rows:
        for name, value in (("serial", row.serial), ("nvml_uuid", row.nvml_uuid)):
            if not value:
                row.errors.append(f"{name} is empty.")
            elif value in (known_serials if name == "serial" else known_uuids):
                row.errors.append(f"{name} {value} is already registered.")
            elif (serials if name == "serial" else uuids)[value] > 1:
                first = first_line.setdefault((name, value), row.line)
                if first != row.line:
                    row.errors.append(f"{name} {value} duplicates line {first}.")
                else:
                    row.errors.append(f"{name} {value} appears more than once in the file.")
        row.model = models.get(row.model_name)
        if row.model is None:
            row.errors.append(
                f"model {row.model_name!r} is not in the catalog; "
                f"known: {', '.join(sorted(models)) or 'none'}."
            )
        row.received_at = _instant(row, default_received)
        _check_place(row, nodes)
    _check_slots(rows)


def _instant(row: ImportRow, default: datetime) -> datetime | None:
    if not row.received_text:
        return default
    try:
        value = datetime.fromisoformat(row.received_text)
    except ValueError:
        row.errors.append(f"received_at {row.received_text!r} is not an ISO 8601 instant.")
        return None
    if value.tzinfo is None:
        row.errors.append(
            f"received_at {row.received_text!r} has no offset; write e.g. 2026-03-01T09:00:00Z."
        )
        return None
    if value.microsecond:
        row.errors.append("received_at must be on a whole second.")
        return None
    return value.astimezone(UTC)


def _check_place(row: ImportRow, nodes: dict[str, Node]) -> None:
    if not row.hostname:
        if row.slot_text:
            row.errors.append("slot is given without a node.")
        return
    row.node = nodes.get(row.hostname)
    if row.node is None:
        row.errors.append(f"node {row.hostname!r} does not exist.")
        return
    if not row.slot_text:
        row.errors.append(f"slot is required with node {row.hostname}.")
        return
    try:
        row.slot = int(row.slot_text)
    except ValueError:
        row.errors.append(f"slot {row.slot_text!r} is not a whole number.")
        return
    if not 0 <= row.slot < row.node.gpu_slots:
        row.errors.append(
            f"slot {row.slot} does not exist on {row.hostname} (0 to {row.node.gpu_slots - 1})."
        )
        row.slot = None
    elif row.node.decommissioned_at is not None:
        row.errors.append(f"node {row.hostname} is decommissioned.")


def _check_slots(rows: list[ImportRow]) -> None:
    placed = [row for row in rows if row.node is not None and row.slot is not None]
    if not placed:
        return
    wanted = Q()
    for row in placed:
        wanted |= Q(node=row.node, slot=row.slot)
    occupied = {
        (p.node_id, p.slot): p
        for p in Placement.objects.filter(wanted)
        .filter(valid_to__isnull=True)
        .select_related("gpu")
    }
    first: dict[tuple[object, int], int] = {}
    for row in placed:
        if row.node is None or row.slot is None:
            raise RuntimeError(f"row {row.line}: placed without a node and slot")
        key = (row.node.pk, row.slot)
        taken = occupied.get(key)
        if taken is not None:
            row.errors.append(
                f"slot {row.slot} of {row.hostname} holds GPU {taken.gpu.serial} "
                f"since {iso_z(taken.valid_from)}."
            )
        elif key in first:
            row.errors.append(
                f"slot {row.slot} of {row.hostname} is also used on line {first[key]}."
            )
        else:
            first[key] = row.line


@transaction.atomic
def gpu_import_commit(*, text: str, by: User | None, reason: str = "") -> list[Gpu]:
    """Imports every GPU in the file, or none: any error raises ValidationError listing them.

    The file is checked again inside the transaction; the database's unique constraints and
    placement triggers back the checks up against a concurrent import.
    """
    # One import at a time: two files naming the same slot would both pass their checks.
    with transaction.get_connection().cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended('fleet_gpu_import', 0))")
    preview = gpu_import_preview(text=text)
    if not preview.ok:
        raise ValidationError({"file": preview.error_lines()})
    gpus = [
        Gpu(serial=row.serial, nvml_uuid=row.nvml_uuid, model=row.model) for row in preview.rows
    ]
    with database_rules("Import: "):
        Gpu.objects.bulk_create(gpus)
        LifecycleTransition.objects.bulk_create(
            LifecycleTransition(
                gpu=gpu,
                state=LifecycleState.RECEIVED,
                at=row.arrival,
                reason=reason or "Imported from CSV.",
                recorded_by=by,
            )
            for gpu, row in zip(gpus, preview.rows, strict=True)
        )
        Placement.objects.bulk_create(
            Placement(gpu=gpu, node=row.node, slot=row.slot, valid_from=row.arrival, created_by=by)
            for gpu, row in zip(gpus, preview.rows, strict=True)
            if row.node is not None and row.slot is not None
        )
    audit_log(
        actor=by,
        reason=reason or "Imported from CSV.",
        events=[
            AuditEvent.of(
                gpu,
                action="gpu.import",
                after={
                    **snapshot(gpu, ["serial", "nvml_uuid", "model_id"]),
                    "line": row.line,
                    "received_at": row.received_at,
                    "node": row.hostname or None,
                    "slot": row.slot,
                },
            )
            for gpu, row in zip(gpus, preview.rows, strict=True)
        ],
    )
    return gpus
