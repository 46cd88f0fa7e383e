"""Telemetry ingestion: node keys, request limits, worker batching, retention, staleness."""

from config.env import env_int, env_str

# Node keys are derived, never stored: HMAC-SHA256(secret, "{node_id}:{generation}").
# Development and test settings set a fixed insecure default; production must set it.
STEWARD_NODE_KEY_SECRET = env_str(
    "STEWARD_NODE_KEY_SECRET",
    hint="Set STEWARD_NODE_KEY_SECRET (or STEWARD_NODE_KEY_SECRET_FILE) to a long random string; "
    "changing it invalidates every node key.",
)

# The request: signature freshness and body limits (compressed as sent, and once inflated).
TELEMETRY_SIGNATURE_TOLERANCE_S = env_int("TELEMETRY_SIGNATURE_TOLERANCE_S", 300, minimum=1)
TELEMETRY_MAX_BODY_BYTES = env_int("TELEMETRY_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
TELEMETRY_MAX_INFLATED_BYTES = env_int("TELEMETRY_MAX_INFLATED_BYTES", 16 * 1024 * 1024, minimum=1)
TELEMETRY_BOOTSTRAP_TOKEN_TTL_S = env_int("TELEMETRY_BOOTSTRAP_TOKEN_TTL_S", 86_400, minimum=60)

# The worker: batches per task, windows per transaction (chunk), and how long a chunk may sit
# idle holding its batches before PostgreSQL ends it (a hung worker).
TELEMETRY_CLAIM_BATCHES = env_int("TELEMETRY_CLAIM_BATCHES", 5000, minimum=1)
# ... and no more batches than it takes to reach this many windows, so that a backlog of large
# batches is shared between worker processes.
TELEMETRY_CLAIM_WINDOWS = env_int("TELEMETRY_CLAIM_WINDOWS", 40_000, minimum=1)
# A chunk marks each (GPU, hour) it touched once, whatever its windows: the larger the chunk,
# the fewer marks per window (in 8-window batches, 2,000 batches a chunk meant ~0.5 mark per
# window, the costliest statement of the chunk; 5,000 batches about half that).
TELEMETRY_CHUNK_WINDOWS = env_int("TELEMETRY_CHUNK_WINDOWS", 40_000, minimum=1)
TELEMETRY_CLAIM_TIMEOUT_S = env_int("TELEMETRY_CLAIM_TIMEOUT_S", 300, minimum=1)
TELEMETRY_MAX_ATTEMPTS = env_int("TELEMETRY_MAX_ATTEMPTS", 5, minimum=1)
# The derived pass: (GPU, hour) marks recomputed per transaction, and how old a mark may get
# before beat's sweep re-queues the pass (its task was lost).
TELEMETRY_DERIVED_CLAIM_HOURS = env_int("TELEMETRY_DERIVED_CLAIM_HOURS", 20_000, minimum=1)
TELEMETRY_DERIVED_SWEEP_AFTER_S = env_int("TELEMETRY_DERIVED_SWEEP_AFTER_S", 30, minimum=0)
# The sweep re-queues batches still pending after this long (Redis lost the task).
TELEMETRY_SWEEP_AFTER_S = env_int("TELEMETRY_SWEEP_AFTER_S", 120, minimum=0)
# A window more than this far ahead of the server's clock is rejected.
TELEMETRY_MAX_FUTURE_S = env_int("TELEMETRY_MAX_FUTURE_S", 300, minimum=0)
# A node silent for this many windows is stale: its GPUs count as no_data.
TELEMETRY_STALE_AFTER_WINDOWS = env_int("TELEMETRY_STALE_AFTER_WINDOWS", 3, minimum=1)

# Raw windows and raw batch bodies are dropped after this many days; hourly rollups stay.
TELEMETRY_RAW_RETENTION_DAYS = env_int("TELEMETRY_RAW_RETENTION_DAYS", 90, minimum=1)
TELEMETRY_BATCH_RETENTION_DAYS = env_int("TELEMETRY_BATCH_RETENTION_DAYS", 14, minimum=1)
TELEMETRY_PARTITIONS_AHEAD_DAYS = env_int("TELEMETRY_PARTITIONS_AHEAD_DAYS", 7, minimum=1)
