"""POST /api/v1/agents/enrol: a one-time bootstrap token for a derived node key."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from telemetry.keys import node_key_derive
from telemetry.models import BootstrapToken, NodeCredential, NodeStatus
from telemetry.services.enrolment import bootstrap_token_issue
from telemetry.testing import batch_document, fleet_node, signed_batch

ENROL = "/api/v1/agents/enrol"


@pytest.fixture
def bare_node(db):
    fake = fleet_node(gpus=1)
    NodeCredential.objects.filter(node=fake.node).delete()
    return fake.node


def test_enrolment_issues_a_key_that_is_never_stored(bare_node, client, oscar):
    token = bootstrap_token_issue(node=bare_node, by=oscar)
    stored = BootstrapToken.objects.get()
    assert stored.token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    response = client.post(
        ENROL,
        {"bootstrap_token": token, "hostname": bare_node.hostname, "gpus": [{"uuid": "GPU-1"}]},
        content_type="application/json",
    )
    assert response.status_code == 201
    answer = response.json()
    assert answer["node_id"] == str(bare_node.id)
    assert answer["node_key"] == node_key_derive(node_id=bare_node.id, generation=1)
    credential = NodeCredential.objects.get(node=bare_node)
    assert credential.key_sha256 == hashlib.sha256(answer["node_key"].encode()).hexdigest()
    assert answer["node_key"] not in str(list(NodeCredential.objects.values()))
    assert NodeStatus.objects.get(node=bare_node).reported_gpus == [{"uuid": "GPU-1"}]


def test_a_token_works_once(bare_node, client):
    token = bootstrap_token_issue(node=bare_node, by=None)
    payload = {"bootstrap_token": token, "hostname": bare_node.hostname, "gpus": []}
    assert client.post(ENROL, payload, content_type="application/json").status_code == 201
    again = client.post(ENROL, payload, content_type="application/json")
    assert again.status_code == 403
    assert again.json()["error"] == "enrolment_refused"


def test_an_expired_token_is_refused(bare_node, client):
    token = bootstrap_token_issue(node=bare_node, by=None, ttl=dt.timedelta(seconds=-1))
    payload = {"bootstrap_token": token, "hostname": bare_node.hostname}
    assert client.post(ENROL, payload, content_type="application/json").status_code == 403


def test_re_enrolment_revokes_the_previous_key(bare_node, client):
    from telemetry.testing import FakeNode

    keys = []
    for _ in range(2):
        token = bootstrap_token_issue(node=bare_node, by=None)
        payload = {"bootstrap_token": token, "hostname": bare_node.hostname}
        keys.append(client.post(ENROL, payload, content_type="application/json").json()["node_key"])
    assert keys[0] != keys[1]
    for key, status in ((keys[0], 401), (keys[1], 202)):
        fake = FakeNode(node=bare_node, key=key)
        body, headers = signed_batch(fake, batch_document(node=fake, windows=[]))
        response = client.post(
            "/api/v1/telemetry/batches",
            data=body,
            content_type=headers.pop("Content-Type"),
            headers=headers,
        )
        assert response.status_code == status


def test_a_token_never_looks_like_a_command_line_option(bare_node):
    """A bare URL-safe token starts with "-" one time in 64; the agent's argument parser
    would then take it for an option. Issued tokens carry a fixed prefix."""
    tokens = [bootstrap_token_issue(node=bare_node, by=None) for _ in range(200)]
    assert all(t.startswith("stb_") and len(t) == 47 for t in tokens)
