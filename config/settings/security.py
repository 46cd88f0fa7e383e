"""Secrets, hosts, cookies and the Content Security Policy (Django's built-in)."""

from django.utils.csp import CSP

from config.env import env_bool, env_list, env_str

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str(
    "SECRET_KEY",
    hint="Set SECRET_KEY (or SECRET_KEY_FILE) to a long random string.",
)
ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS",
    hint="Set ALLOWED_HOSTS to the comma-separated host names Steward answers to.",
)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = 60 * 60 * 12
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# Everything is served from our own origin; scripts and styles carry the per-request nonce.
SECURE_CSP: dict[str, list[str]] = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# Redoc (/api/v1/redoc) only, the site's policy plus two things its vendored bundle
# (drf-spectacular-sidecar) needs and cannot be told otherwise (docs/api.md, "Swagger UI and
# Redoc"): the one <style> it injects without the nonce (perfect-scrollbar's CSS, inserted
# empty and then filled), allowed by the hashes of its exact texts, empty and filled; and its
# search index running in a worker made from a blob: URL. Upgrading the sidecar may change
# the hash: tests/e2e/test_api_docs_browser.py then fails naming the violation.
_EMPTY_STYLE = "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
_SCROLLBAR_STYLE = "'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc='"
API_REDOC_CSP: dict[str, list[str]] = {
    **SECURE_CSP,
    "style-src": [*SECURE_CSP["style-src"], _EMPTY_STYLE, _SCROLLBAR_STYLE],
    "worker-src": [CSP.SELF, "blob:"],
}
