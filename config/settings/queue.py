"""Redis: the Celery broker, the result store for waiting callers, and the cache.

Redis holds nothing that matters: PostgreSQL is the record, and a periodic sweep re-queues
any work that Redis lost.
"""

from config.env import env_int, env_str, redis_from_url

REDIS_URL = env_str(
    "REDIS_URL",
    hint=(
        "Give a redis:// or unix:// URL, or run through `make demo` / `make test`, "
        "which start an embedded Redis under var/ and set it."
    ),
)
_redis = redis_from_url(REDIS_URL)

CACHES = {
    "default": {
        "BACKEND": "config.cache.ReusedClientRedisCache",
        "LOCATION": _redis.cache,
        "KEY_PREFIX": "steward",
    }
}

CELERY_BROKER_URL = _redis.celery
CELERY_RESULT_BACKEND = _redis.celery
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_DEFAULT_QUEUE", "steward")
# At-least-once: a task is acknowledged only after it ran, and re-delivered if its
# worker died. Every task must therefore be idempotent.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 600, minimum=1)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 30 if CELERY_TASK_TIME_LIMIT > 60 else None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "beat-heartbeat": {"task": "steward.beat_heartbeat", "schedule": 60.0},
    # Telemetry: the outbox sweeps (Redis may lose tasks; PostgreSQL keeps batches and marks),
    # staleness, daily partitions ahead and raw retention.
    "telemetry-batches-sweep": {"task": "telemetry.batches_sweep", "schedule": 60.0},
    # Derived work (transitions, rollups) left marked by a lost task.
    "telemetry-derived-sweep": {"task": "telemetry.derived_sweep", "schedule": 60.0},
    "telemetry-nodes-mark-stale": {"task": "telemetry.nodes_mark_stale", "schedule": 60.0},
    "telemetry-partitions-maintain": {
        "task": "telemetry.partitions_maintain",
        "schedule": 3600.0,
    },
    "telemetry-batches-purge": {"task": "telemetry.batches_purge", "schedule": 3600.0},
    # Webhooks: due deliveries (retries beyond a minute are queued only here) and events whose
    # dispatch task was lost.
    "webhooks-deliveries-sweep": {"task": "webhooks.deliveries_sweep", "schedule": 15.0},
    # Webhooks: events, deliveries and attempt logs past their retention.
    "webhooks-events-prune": {"task": "webhooks.events_prune", "schedule": 3600.0},
    # Portal: notification emails from the audit trail and state changes, read forward.
    "portal-notifications-scan": {"task": "portal.notifications_scan", "schedule": 60.0},
    # Portal: notices in the portal's list past PORTAL_NOTICE_RETENTION_DAYS.
    "portal-notices-prune": {"task": "portal.notices_prune", "schedule": 3600.0},
}
