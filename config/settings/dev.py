"""Local development and `make demo`: debug on, loopback only, a fixed development key."""

import os

os.environ.setdefault("DEBUG", "true")
os.environ.setdefault("SECRET_KEY", "dev-only-insecure-key-never-used-in-production-steward")
os.environ.setdefault("STEWARD_NODE_KEY_SECRET", "dev-only-insecure-node-key-secret-steward")
os.environ.setdefault("STEWARD_WEBHOOK_KEY_SECRET", "dev-only-insecure-webhook-key-secret-steward")
os.environ.setdefault("WEBHOOK_ALLOW_HTTP", "true")
os.environ.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
os.environ.setdefault("LOG_FORMAT", "text")
# Who issues the statements (an example company outside production).
os.environ.setdefault("STEWARD_OPERATOR_LEGAL_NAME", "Example GPU Hosting Ltd")
os.environ.setdefault(
    "STEWARD_OPERATOR_ADDRESS", "1 Example Street|Example City EX1 2MP|United Kingdom"
)
os.environ.setdefault(
    "STEWARD_OPERATOR_REGISTRATION", "Registered in England and Wales No. 00000000"
)

from config.settings.base import *
from config.settings.mail import mailer

MAILERS = {"default": mailer("console")}
