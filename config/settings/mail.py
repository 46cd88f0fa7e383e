"""Outgoing email (notifications are sent by Celery tasks). Django 6.1's MAILERS setting."""

from config.env import env_bool, env_int, env_str

DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Steward <steward@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
EMAIL_SUBJECT_PREFIX = "[Steward] "

# "smtp" in production; "console" prints mails (development); "locmem" keeps them in memory.
_MAILER_BACKENDS = {
    "smtp": "django.core.mail.backends.smtp.EmailBackend",
    "console": "django.core.mail.backends.console.EmailBackend",
    "locmem": "django.core.mail.backends.locmem.EmailBackend",
}


def mailer(kind: str) -> dict[str, object]:
    if kind != "smtp":
        return {"BACKEND": _MAILER_BACKENDS[kind]}
    return {
        "BACKEND": _MAILER_BACKENDS["smtp"],
        "OPTIONS": {
            "host": env_str("SMTP_HOST", "localhost"),
            "port": env_int("SMTP_PORT", 587, minimum=1),
            "username": env_str("SMTP_USERNAME", ""),
            "password": env_str("SMTP_PASSWORD", ""),
            "use_tls": env_bool("SMTP_USE_TLS", True),
            "timeout": env_int("SMTP_TIMEOUT", 10, minimum=1),
        },
    }


MAILERS = {"default": mailer(env_str("MAILER", "smtp"))}
