"""The demo supervisor (no Django) and the demo seed agree on the operator's second factor."""

from datetime import UTC, datetime

from config.demo import DEMO_TOTP_SECRET, totp_now
from portal.demo import DEMO_TOTP_SECRET as SEEDED_SECRET
from portal.demo import demo_totp_code


def test_banner_code_is_the_code_the_seeded_device_accepts():
    assert DEMO_TOTP_SECRET == SEEDED_SECRET
    for moment in (
        datetime(2026, 11, 21, 18, 0, 5, tzinfo=UTC),
        datetime(2027, 1, 1, 0, 0, 29, tzinfo=UTC),
    ):
        assert totp_now(DEMO_TOTP_SECRET, moment.timestamp()) == demo_totp_code(at=moment)


def test_totp_matches_rfc6238_test_vector():
    # RFC 6238 appendix B, SHA-1 secret "12345678901234567890" at T=59 → 94287082 (8 digits);
    # the last six digits are what a 6-digit authenticator shows.
    secret = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
    assert totp_now(secret, 59) == "287082"
