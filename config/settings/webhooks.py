"""Partner webhooks: the secret signing keys derive from, the SSRF guard, timeouts, retries."""

from config.env import env_bool, env_int, env_str

# Endpoint signing secrets are derived, never stored:
# HMAC-SHA256(secret, "webhook:{endpoint_id}:{generation}"). Development and test settings set
# a fixed insecure default; production must set it. Changing it changes every endpoint's secret.
STEWARD_WEBHOOK_KEY_SECRET = env_str(
    "STEWARD_WEBHOOK_KEY_SECRET",
    hint="Set STEWARD_WEBHOOK_KEY_SECRET (or STEWARD_WEBHOOK_KEY_SECRET_FILE) to a long random "
    "string; changing it changes every webhook endpoint's signing secret.",
)

# The SSRF guard: plain http:// is allowed only in development and tests, loopback addresses
# only in tests (they deliver to a server on 127.0.0.1). Production forces both off.
WEBHOOK_ALLOW_HTTP = env_bool("WEBHOOK_ALLOW_HTTP", False)
WEBHOOK_ALLOW_LOOPBACK = False

# One request: connect and read timeouts, and how much of the answer is read (the rest is not).
WEBHOOK_TIMEOUT_S = env_int("WEBHOOK_TIMEOUT_S", 10, minimum=1)
WEBHOOK_RESPONSE_MAX_BYTES = env_int("WEBHOOK_RESPONSE_MAX_BYTES", 64 * 1024, minimum=1024)
# A delivery is retried for this long after its first attempt, then fails (and an endpoint that
# failed for the whole window is disabled). A rotated secret keeps signing for the grace period.
WEBHOOK_RETRY_WINDOW_S = env_int("WEBHOOK_RETRY_WINDOW_S", 3 * 86_400, minimum=60)
WEBHOOK_ROTATION_GRACE_S = env_int("WEBHOOK_ROTATION_GRACE_S", 86_400, minimum=0)
# Events turned into deliveries per dispatch transaction.
WEBHOOK_DISPATCH_BATCH = env_int("WEBHOOK_DISPATCH_BATCH", 500, minimum=1)
# Events, with their deliveries and attempt logs, are deleted this long after they were
# written (never while a delivery is still being retried), in passes of WEBHOOK_PRUNE_BATCH.
WEBHOOK_RETENTION_DAYS = env_int("WEBHOOK_RETENTION_DAYS", 90, minimum=7)
WEBHOOK_PRUNE_BATCH = env_int("WEBHOOK_PRUNE_BATCH", 5000, minimum=1)
