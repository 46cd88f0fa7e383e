"""The test suite: real PostgreSQL and Redis (from the environment), fast hashing."""

import os

os.environ.setdefault("SECRET_KEY", "test-only-insecure-key-never-used-in-production-steward")
os.environ.setdefault("STEWARD_NODE_KEY_SECRET", "test-only-insecure-node-key-secret-steward")
os.environ.setdefault("STEWARD_WEBHOOK_KEY_SECRET", "test-only-insecure-webhook-key-secret-steward")
os.environ.setdefault("WEBHOOK_ALLOW_HTTP", "true")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost,127.0.0.1")
os.environ.setdefault("DEBUG", "false")
# Who issues the statements (an example company outside production).
os.environ.setdefault("STEWARD_OPERATOR_LEGAL_NAME", "Example GPU Hosting Ltd")
os.environ.setdefault(
    "STEWARD_OPERATOR_ADDRESS", "1 Example Street|Example City EX1 2MP|United Kingdom"
)
os.environ.setdefault(
    "STEWARD_OPERATOR_REGISTRATION", "Registered in England and Wales No. 00000000"
)
# A queue of its own per test run, so a demo worker on the same Redis never takes its tasks.
os.environ.setdefault("CELERY_DEFAULT_QUEUE", f"steward-test-{os.getpid()}")

from config.settings.base import *
from config.settings.mail import mailer

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
MAILERS = {"default": mailer("locmem")}
CACHES["default"]["KEY_PREFIX"] = "steward-test"
# The suite empties every table between tests with TRUNCATE, which the ledger's tables refuse
# unless the session allows it (billing migration 0005).
_options = DATABASES["default"]["OPTIONS"]
_options["options"] = f"{_options.get('options', '')} -c steward.allow_truncate=on".strip()
# Tests deliver webhooks to an HTTP server of their own on 127.0.0.1.
WEBHOOK_ALLOW_LOOPBACK = True
