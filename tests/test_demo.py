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


def test_the_banner_of_a_second_run_says_it_continues_the_earlier_data(tmp_path):
    from config.demo import _banner

    previous, current = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)
    logs = tmp_path / "demo-logs"
    first = _banner(8000, 8, previous, current, again=False, logs=logs)
    second = _banner(8000, 8, previous, current, again=True, logs=logs)
    assert "continues the data an earlier run left" not in first
    assert f"continues the data an earlier run left in {tmp_path}" in second
    assert "October 2026 is closed now only if it was not yet" in second
    assert f"logs are in {logs}/" in first


def test_scripted_faults_are_said_as_a_reader_would_say_them(tmp_path):
    from config.demo import _scripted_faults
    from portal.demo_nodes import DEMO_NODES

    said = {}
    for node in DEMO_NODES:
        scenario = tmp_path / f"{node.hostname}.toml"
        scenario.write_text(node.scenario_toml(), encoding="utf-8")
        said[node.hostname] = _scripted_faults(str(scenario))
    assert said["fra1-b-n01"] == ["XID 94 on GPU 5, 5 min in"]
    assert said["fra1-b-n04"] == ["gpu lost on GPU 3, 30 min in"]
    assert said["fra1-a-n01"] == [
        "gpu lost on GPU 2, 8 d 14 h in",
        "recover on GPU 2, 8 d 17 h 20 min in",
    ]
    assert said["fra1-a-n03"] == []
