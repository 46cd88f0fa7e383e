"""Structured JSON logs on stdout, each line carrying the request id when there is one."""

from config.env import env_str

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOG_FORMAT = env_str("LOG_FORMAT", "json")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "config.logs.RequestIdFilter"}},
    "formatters": {
        "json": {"()": "config.logs.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {
        "stdout": {
            "class": "config.logs.StdoutHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "text",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["stdout"], "level": LOG_LEVEL},
    "loggers": {
        # The request log line comes from RequestIdMiddleware, with the id and duration.
        "django.server": {"level": "WARNING"},
        "django.request": {"level": "ERROR"},
    },
}
