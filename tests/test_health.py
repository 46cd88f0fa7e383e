"""Probes, request ids, JSON logs and security headers."""

import json
import logging

import pytest

from config.logs import JsonFormatter, RequestIdFilter


def test_healthz(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_database_and_broker(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "broker": "ok"}


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_unreachable(client, settings):
    from config.celery import app

    app.conf.update(broker_url="redis://127.0.0.1:1/0")  # nothing listens on port 1
    try:
        response = client.get("/readyz")
    finally:
        app.conf.update(broker_url=settings.CELERY_BROKER_URL)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"].startswith("unreachable: ")


def test_request_id_is_echoed_when_sane_and_replaced_when_not(client):
    assert client.get("/healthz", HTTP_X_REQUEST_ID="abc-123").headers["X-Request-ID"] == "abc-123"
    replaced = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\n").headers["X-Request-ID"]
    assert len(replaced) == 32
    assert replaced != "bad id\n"


def test_request_is_logged_with_its_id(client, caplog):
    with caplog.at_level(logging.INFO, logger="steward.request"):
        client.get("/healthz", HTTP_X_REQUEST_ID="req-42")
    (record,) = [r for r in caplog.records if r.name == "steward.request"]
    assert (record.method, record.path, record.status) == ("GET", "/healthz", 200)
    line = json.loads(JsonFormatter().format(_with_filter(record)))
    assert line["request_id"] == "req-42"
    assert isinstance(line["duration_ms"], float)
    assert line["path"] == "/healthz"
    assert line["status"] == 200
    assert line["message"] == "GET /healthz 200"


def _with_filter(record):
    RequestIdFilter().filter(record)
    return record


def test_json_formatter_carries_the_current_request_id():
    from config.logs import request_id_var

    token = request_id_var.set("r-1")
    try:
        record = logging.makeLogRecord(
            {"name": "x", "levelname": "INFO", "msg": "hi %s", "args": ("there",)}
        )
        RequestIdFilter().filter(record)
        line = json.loads(JsonFormatter().format(record))
    finally:
        request_id_var.reset(token)
    assert (line["message"], line["request_id"], line["level"]) == ("hi there", "r-1", "INFO")


@pytest.mark.django_db
def test_security_headers_and_csp(client):
    response = client.get("/login/")
    assert response.status_code == 200
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
