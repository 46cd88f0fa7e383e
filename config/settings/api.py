"""Django REST framework defaults (authenticated, JSON only, paginated) and the partner API."""

from config.env import env_int, env_str

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.StrictJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "PAGE_SIZE": 100,
    "UNAUTHENTICATED_USER": None,
}

# Requests per API key, in DRF's "<n>/<second|minute|hour|day>" form; over it: 429 with
# Retry-After. Counted in Redis (the default cache), so it holds across web processes.
API_KEY_RATE = env_str("API_KEY_RATE", "600/minute")
# The longest range a series request may cover, in buckets (hours or days).
API_SERIES_MAX_BUCKETS = env_int("API_SERIES_MAX_BUCKETS", 744, minimum=1)
# How long a published statement's rendered lines stay in the cache (Redis) once asked for:
# they never change, so this only bounds the memory they take.
API_STATEMENT_LINES_CACHE_S = env_int("API_STATEMENT_LINES_CACHE_S", 86_400, minimum=1)

SPECTACULAR_SETTINGS = {
    "TITLE": "Steward partner API",
    "DESCRIPTION": (
        "Read what owners of GPUs granted you: GPUs, ownership, availability and utilization, "
        "incidents, maintenance, statements and payouts. Earnings figures are not guaranteed: "
        "they depend on utilization, uptime, demand, costs, hardware performance and market "
        "conditions, and can be zero. Every earnings figure carries its basis and the "
        "disclosure version it was issued under."
    ),
    "VERSION": "1.0.0",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its viewers are public; every endpoint they describe needs a key.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "PREPROCESSING_HOOKS": ["api.schema.partner_endpoints_only"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.problem_responses",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "StatusEnum": "billing.models.Statement.Status",
        "WebhookDeliveryStatusEnum": "webhooks.models.WebhookDelivery.Status",
    },
}
