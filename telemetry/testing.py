"""A minimal agent for tests and benchmarks: fleet fixtures, batch bodies, signed headers.

Independent of ``telemetry.agent`` on purpose: it speaks the wire contract as the server reads
it, so a drift between the two shows up as a failing test rather than a shared bug.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from core.instants import iso_z
from fleet.models import Cluster, Gpu, GpuModel, LifecycleState, Node, Placement, Site
from telemetry.keys import node_key_derive, node_key_sha256, request_signature
from telemetry.models import BatchBody, IngestBatch, NodeCredential
from telemetry.schema import BodyTooLarge, SchemaError, batch_decode_gzip, gzip_json
from telemetry.services.processing.prepared import rows_stored

BATCHES_PATH = "/api/v1/telemetry/batches"


def uuid7(ms: int | None = None) -> uuid.UUID:
    ms = int(time.time() * 1000) if ms is None else ms
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64
    value |= 0b10 << 62 | (rand & ((1 << 62) - 1))
    return uuid.UUID(int=value)


def rfc3339(at: dt.datetime) -> str:
    return iso_z(at)


@dataclass
class FakeNode:
    node: Node
    key: str
    gpus: list[Gpu] = field(default_factory=list)

    @property
    def id(self) -> uuid.UUID:
        return self.node.id


def fleet_node(
    *,
    gpus: int = 8,
    hostname: str | None = None,
    placed_from: dt.datetime | None = None,
    cluster: Cluster | None = None,
) -> FakeNode:
    """A node with ``gpus`` GPUs placed on it since ``placed_from``, and a node key."""
    if cluster is None:
        site, _ = Site.objects.get_or_create(
            code="test", defaults={"name": "Test", "country": "DE"}
        )
        cluster, _ = Cluster.objects.get_or_create(site=site, code="c1", defaults={"name": "C1"})
    model, _ = GpuModel.objects.get_or_create(
        name="NVIDIA H100 80GB HBM3", defaults={"memory_mib": 81559, "tdp_w": 700}
    )
    tag = uuid.uuid4().hex[:10]
    node = Node.objects.create(cluster=cluster, hostname=hostname or f"gpu-{tag}")
    since = placed_from or dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    made = Gpu.objects.bulk_create(
        [
            Gpu(
                nvml_uuid=f"GPU-{uuid.uuid4()}",
                serial=f"S{tag}{slot:02d}",
                model=model,
                lifecycle_state=LifecycleState.IN_SERVICE,
            )
            for slot in range(gpus)
        ]
    )
    Placement.objects.bulk_create(
        [
            Placement(gpu=gpu, node=node, slot=slot, valid_from=since)
            for slot, gpu in enumerate(made)
        ]
    )
    generation = 1
    key = node_key_derive(node_id=node.id, generation=generation)
    NodeCredential.objects.create(node=node, generation=generation, key_sha256=node_key_sha256(key))
    return FakeNode(node=node, key=key, gpus=made)


# The reason a degraded or down window gives when a test names only its state (a reason is
# required with either, docs/agent.md 5.3).
_STATE_REASON = {"up": None, "degraded": "row_remap_pending", "down": "gpu_is_lost"}


def window(gpu_uuid: str, start: dt.datetime, **overrides: Any) -> dict[str, Any]:
    """A plausible healthy window; override any field (a state alone brings a reason)."""
    doc: dict[str, Any] = {
        "gpu_uuid": gpu_uuid,
        "window_start": rfc3339(start),
        "samples_ok": 12,
        "samples_expected": 12,
        "state": "up",
        "state_reason": None,
        "util_gpu": {"min": 40.0, "avg": 50.0, "max": 60.0},
        "util_mem": {"min": 10.0, "avg": 20.0, "max": 30.0},
        "mem_used_bytes": {"min": 1 << 30, "avg": 2 << 30, "max": 3 << 30},
        "mem_total_bytes": 80 << 30,
        "power_w": {"avg": 350.0, "max": 400.0},
        "energy_mj": 1_000_000_000,
        "temp_c": {"min": 50.0, "avg": 55.0, "max": 60.0},
        "clock_sm_mhz": {"min": 1500.0, "avg": 1700.0, "max": 1980.0},
        "clock_mem_mhz": {"min": 2619.0, "avg": 2619.0, "max": 2619.0},
        "throttle_reasons": 0,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "retired_pages": 0,
        "pcie_replays": 0,
        "recovery_action": None,
    }
    doc.update(overrides)
    if "state_reason" not in overrides:
        doc["state_reason"] = _STATE_REASON.get(doc["state"])
    return doc


def event(
    kind: str, at: dt.datetime, *, gpu_uuid: str | None = None, **overrides: Any
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "event_id": str(uuid7(int(at.timestamp() * 1000))),
        "gpu_uuid": gpu_uuid,
        "kind": kind,
        "occurred_at": at.astimezone(dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "xid": None,
        "detail": {},
    }
    doc.update(overrides)
    return doc


def batch_document(
    *,
    node: FakeNode,
    windows: list[dict[str, Any]],
    events: list[dict[str, Any]] | None = None,
    batch_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    return {
        "schema": 1,
        "batch_id": str(batch_id or uuid7()),
        "node_id": str(node.id),
        "agent": {"version": "0.1.0-test", "driver_version": "570.86.15", "cuda_version": "12.8"},
        "sent_at": rfc3339(timezone.now()),
        "windows": windows,
        "events": events or [],
    }


def signed_headers(
    *,
    node_id: uuid.UUID | str,
    key: str,
    body: bytes,
    batch_id: str,
    timestamp: int | None = None,
    path: str = BATCHES_PATH,
) -> dict[str, str]:
    """Request headers as an agent sends them (names as in HTTP, not Django's META)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        "Idempotency-Key": batch_id,
        "X-Steward-Node": str(node_id),
        "X-Steward-Timestamp": str(ts),
        "X-Steward-Signature": request_signature(
            node_key=key,
            method="POST",
            path=path,
            timestamp=ts,
            batch_id=batch_id,
            body_sha256=hashlib.sha256(body).hexdigest(),
        ),
    }


def signed_batch(
    node: FakeNode, document: dict[str, Any], *, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    body = gzip_json(document)
    return body, signed_headers(
        node_id=node.id, key=node.key, body=body, batch_id=document["batch_id"], timestamp=timestamp
    )


def minute(at: dt.datetime) -> dt.datetime:
    return at.replace(second=0, microsecond=0)


def batches_stored(
    batches: list[tuple[IngestBatch, bytes]], *, prepared: bool = True
) -> list[IngestBatch]:
    """Stores (batch, body) pairs straight in PostgreSQL, as the endpoint would have (the
    batch table's trigger queues the pending ones): for tests and benchmarks that need stored
    batches whose task was never sent, or a backlog faster than the endpoint takes it.

    With ``prepared``, each decodable body's windows are stored as COPY-ready rows beside it,
    as the endpoint stores them; without, as a batch stored before the endpoint did."""
    stored = IngestBatch.objects.bulk_create([batch for batch, _ in batches], batch_size=500)
    BatchBody.objects.bulk_create(
        [
            BatchBody(batch=batch, body=body, rows=_rows(batch, body) if prepared else None)
            for batch, (_, body) in zip(stored, batches, strict=True)
        ],
        batch_size=500,
    )
    return stored


def _rows(batch: IngestBatch, body: bytes) -> bytes | None:
    try:
        decoded = batch_decode_gzip(body, limit=1 << 26)
    except (SchemaError, BodyTooLarge):
        return None  # the endpoint would have refused it: a test's broken body
    return rows_stored(decoded, batch.node_id)
