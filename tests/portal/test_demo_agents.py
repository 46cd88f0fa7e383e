"""The demo's simulated nodes report exactly the GPUs the demo inventory holds."""

import json

import pytest

from fleet.models import Placement
from portal.demo import demo_agents_prepare, seed_demo
from telemetry.agent.fake.scenario import load_scenario
from telemetry.models import BootstrapToken
from telemetry.services.enrolment import node_enrol

pytestmark = pytest.mark.django_db


def test_each_scenario_reports_the_gpus_placed_on_its_node(tmp_path):
    seed_demo(password="demo-password-123")
    manifest = demo_agents_prepare(agents_dir=tmp_path)
    assert len(manifest) == 8
    for entry in manifest:
        scenario = load_scenario(str(entry["scenario"]))  # what `steward-agent --fake` reads
        assert scenario.hostname == entry["hostname"]
        placed = sorted(
            Placement.objects.filter(
                node__hostname=entry["hostname"], valid_to__isnull=True
            ).values_list("slot", "gpu__nvml_uuid", "gpu__serial", "gpu__model__name")
        )
        assert [tuple(identity) for identity in scenario.identities()] == placed
    assert json.loads((tmp_path / "agents.json").read_text()) == manifest


def test_tokens_only_for_nodes_whose_agent_has_no_key(tmp_path):
    seed_demo(password="demo-password-123")
    first = demo_agents_prepare(agents_dir=tmp_path)
    assert all(entry["bootstrap_token"] for entry in first)
    assert BootstrapToken.objects.count() == 8
    # A key file alone (no credential on the server) is not trusted: a token is issued again.
    (tmp_path / "fra1-a-n01.key").write_text("{}")
    again = demo_agents_prepare(agents_dir=tmp_path)
    assert all(entry["bootstrap_token"] for entry in again)
    assert not (tmp_path / "fra1-a-n01.key").exists()
    # An agent that enrolled and kept its key needs no token on the next start.
    token = again[1]["bootstrap_token"]
    assert token is not None
    node_enrol(bootstrap_token=token, hostname="fra1-a-n02", gpus=[])
    (tmp_path / "fra1-a-n02.key").write_text("{}")
    third = {e["hostname"]: e["bootstrap_token"] for e in demo_agents_prepare(agents_dir=tmp_path)}
    assert third["fra1-a-n02"] is None
    assert all(token for host, token in third.items() if host != "fra1-a-n02")
