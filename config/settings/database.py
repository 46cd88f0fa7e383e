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
# No JIT compilation. Steward's statements are short, or aggregates whose plans PostgreSQL
# overestimates (a lateral probe of a partitioned table counts every partition): JIT then
# spends seconds compiling what runs in milliseconds. Measured: a month's rollup rebuild of
# one GPU, 14.7 s with JIT, 0.12 s without (the derived pass already turned it off per
# transaction). A URL's own `options` come first; this is appended.
_options = DATABASES["default"]["OPTIONS"]
_options["options"] = f"{_options.get('options', '')} -c jit=off".strip()
