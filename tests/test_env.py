"""The typed environment readers fail loudly and parse what deployments actually give."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    redis_from_url,
)


def test_missing_required_names_the_variable_and_how_to_fix(monkeypatch):
    monkeypatch.delenv("STEWARD_X", raising=False)
    with pytest.raises(ImproperlyConfigured, match=r"^STEWARD_X is not set\. Set it like so\.$"):
        env_str("STEWARD_X", hint="Set it like so.")


def test_default_used_only_when_unset_or_empty(monkeypatch):
    monkeypatch.setenv("STEWARD_X", "")
    assert env_str("STEWARD_X", "fallback") == "fallback"
    monkeypatch.setenv("STEWARD_X", "given")
    assert env_str("STEWARD_X", "fallback") == "given"


def test_secret_from_file(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    monkeypatch.delenv("STEWARD_KEY", raising=False)
    monkeypatch.setenv("STEWARD_KEY_FILE", str(secret))
    assert env_str("STEWARD_KEY") == "s3cret"


def test_secret_file_that_cannot_be_read(monkeypatch, tmp_path):
    monkeypatch.setenv("STEWARD_KEY_FILE", str(tmp_path / "absent"))
    with pytest.raises(ImproperlyConfigured, match=r"STEWARD_KEY_FILE=.* cannot be read"):
        env_str("STEWARD_KEY")


def test_value_and_file_together_is_ambiguous(monkeypatch, tmp_path):
    monkeypatch.setenv("STEWARD_KEY", "a")
    monkeypatch.setenv("STEWARD_KEY_FILE", str(tmp_path / "k"))
    with pytest.raises(ImproperlyConfigured, match="Set STEWARD_KEY or STEWARD_KEY_FILE, not both"):
        env_str("STEWARD_KEY")


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("1", True), ("off", False)])
def test_bool(monkeypatch, raw, expected):
    monkeypatch.setenv("STEWARD_FLAG", raw)
    assert env_bool("STEWARD_FLAG", not expected) is expected


def test_bool_rejects_nonsense(monkeypatch):
    monkeypatch.setenv("STEWARD_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match=r"STEWARD_FLAG='maybe' is not a boolean"):
        env_bool("STEWARD_FLAG", False)


def test_int_and_minimum(monkeypatch):
    monkeypatch.setenv("STEWARD_N", "7")
    assert env_int("STEWARD_N", 1) == 7
    monkeypatch.setenv("STEWARD_N", "x")
    with pytest.raises(ImproperlyConfigured, match="is not an integer"):
        env_int("STEWARD_N", 1)
    monkeypatch.setenv("STEWARD_N", "-1")
    with pytest.raises(ImproperlyConfigured, match="below the minimum of 0"):
        env_int("STEWARD_N", 1, minimum=0)


def test_list(monkeypatch):
    monkeypatch.setenv("STEWARD_HOSTS", " a.example, ,b.example ")
    assert env_list("STEWARD_HOSTS") == ["a.example", "b.example"]


def test_database_url_tcp():
    db = database_from_url("postgresql://u%40x:p%2Fw@db.internal:6543/steward?sslmode=require")
    assert {k: db[k] for k in ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")} == {
        "NAME": "steward",
        "USER": "u@x",
        "PASSWORD": "p/w",
        "HOST": "db.internal",
        "PORT": "6543",
        "OPTIONS": {"sslmode": "require"},
    }


def test_database_url_socket_directory():
    db = database_from_url("postgresql://postgres:@/steward?host=/work/var/postgres")
    assert (db["HOST"], db["PORT"], db["NAME"], db["OPTIONS"]) == (
        "/work/var/postgres",
        "",
        "steward",
        {},
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///db.sqlite3", "must be a postgresql:// URL; got scheme 'sqlite'"),
        ("postgresql://localhost", "names no database"),
    ],
)
def test_database_url_rejects(url, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        database_from_url(url)


def test_redis_urls():
    tcp = redis_from_url("redis://127.0.0.1:6379/2")
    assert (tcp.cache, tcp.celery) == ("redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/2")
    sock = redis_from_url("unix:///v/redis.socket?db=3")
    assert (sock.cache, sock.celery) == (
        "unix:///v/redis.socket?db=3",
        "redis+socket:///v/redis.socket?virtual_host=3",
    )
    with pytest.raises(ImproperlyConfigured, match="must be redis://, rediss:// or unix://"):
        redis_from_url("http://x")
