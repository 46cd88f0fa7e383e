import json
import stat

import pytest

from telemetry.agent.credentials import (
    CredentialSource,
    EnrolmentRejected,
    KeyFile,
    enrol,
)
from telemetry.agent.transport import HttpTransport


def test_bootstrap_token_is_exchanged_once_for_a_key_written_0600(tmp_path, steward, clock):
    transport = HttpTransport(steward.url, timeout_s=5)
    key_file = KeyFile(tmp_path / "etc" / "node.key")
    gpus = [{"gpu_uuid": "GPU-1"}]
    source = CredentialSource(
        key_file,
        transport,
        bootstrap_token="boot-token-1",
        hostname="node-a",
        gpus=lambda: gpus,
        agent_version="0.1.0",
        now=clock.now,
        server=steward.url,
    )
    creds = source()
    assert creds is not None
    assert (creds.node_id, creds.node_key) == (steward.node_id, steward.node_key)
    mode = stat.S_IMODE((tmp_path / "etc" / "node.key").stat().st_mode)
    assert mode == 0o600
    doc = json.loads((tmp_path / "etc" / "node.key").read_text())
    assert doc["node_id"] == steward.node_id and doc["server"] == steward.url
    (req,) = steward.received
    assert json.loads(req.body) == {
        "bootstrap_token": "boot-token-1",
        "hostname": "node-a",
        "agent_version": "0.1.0",
        "gpus": gpus,
    }
    assert source() == creds and len(steward.received) == 1  # from the file now
    with pytest.raises(EnrolmentRejected):  # single use
        enrol(transport, bootstrap_token="boot-token-1", hostname="x", gpus=[], agent_version="v")
    transport.close()


def test_rejected_token_is_reported_and_not_retried(tmp_path, steward, clock):
    transport = HttpTransport(steward.url, timeout_s=5)
    source = CredentialSource(
        KeyFile(tmp_path / "node.key"),
        transport,
        bootstrap_token="wrong",
        hostname="n",
        gpus=list,
        agent_version="v",
        now=clock.now,
        server=steward.url,
    )
    assert source() is None and source() is None
    assert source.rejected is not None and len(steward.received) == 1
    transport.close()


def test_key_file_is_reread_when_replaced(tmp_path):
    from telemetry.agent.credentials import Credentials

    key_file = KeyFile(tmp_path / "node.key")
    assert key_file.load() is None
    key_file.write(Credentials("a", "k1"), server="s")
    assert key_file.load() == Credentials("a", "k1")
    key_file.write(Credentials("a", "k2"), server="s")
    assert key_file.load() == Credentials("a", "k2")
