"""PostgreSQL, the only source of truth. No SQLite anywhere, not even in tests."""

from config.env import database_from_url, env_int, env_str

DATABASE_URL = env_str(
    "DATABASE_URL",
    hint=(
        "Give a postgresql:// URL, or run through `make demo` / `make test`, "
        "which start an embedded PostgreSQL under var/ and set it."
    ),
)
DATABASES = {
    "default": {
        **database_from_url(DATABASE_URL),
        "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        "CONN_HEALTH_CHECKS": True,
        "ATOMIC_REQUESTS": False,
    }
}
