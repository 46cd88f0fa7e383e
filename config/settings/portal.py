"""The owner portal: login throttling, the second factor, notification emails."""

from config.env import env_int, env_str

# Where owners reach the portal, for links in emails (no trailing slash).
PORTAL_BASE_URL = env_str("PORTAL_BASE_URL", "http://localhost:8000").rstrip("/")
# Failed logins (password or code) per account and per IP before a lockout, counted over
# PORTAL_LOGIN_LOCKOUT_S, which is also how long the lockout lasts.
PORTAL_LOGIN_FAILURES_PER_ACCOUNT = env_int("PORTAL_LOGIN_FAILURES_PER_ACCOUNT", 5, minimum=1)
PORTAL_LOGIN_FAILURES_PER_IP = env_int("PORTAL_LOGIN_FAILURES_PER_IP", 20, minimum=1)
PORTAL_LOGIN_LOCKOUT_S = env_int("PORTAL_LOGIN_LOCKOUT_S", 15 * 60, minimum=1)
PORTAL_SECOND_FACTOR_TIMEOUT_S = env_int("PORTAL_SECOND_FACTOR_TIMEOUT_S", 5 * 60, minimum=1)
PORTAL_NOTICES_PER_TASK = env_int("PORTAL_NOTICES_PER_TASK", 500, minimum=1)
# Notices in the portal's list are kept this long after they were first shown, then deleted.
PORTAL_NOTICE_RETENTION_DAYS = env_int("PORTAL_NOTICE_RETENTION_DAYS", 365, minimum=30)
