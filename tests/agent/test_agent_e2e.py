"""Whole-node runs against the loopback server, on a fake clock."""

import collections

from telemetry.agent.agent import Agent
from telemetry.agent.spool import Spool
from telemetry.agent.timefmt import parse_rfc3339

from .conftest import START


def test_server_down_for_an_hour_then_every_window_arrives_once_in_order(make_node, steward, clock):
    back_at = START + 3600
    steward.default = lambda headers: 503 if clock.now() < back_at else None
    node = make_node("h100x8", steward)
    node.run_until(START + 3600 + 15 * 60)
    node.agent.shutdown()
    node.deliver_until(clock.now() + 600)  # let the last partial batch go out
    assert node.spool.count() == 0
    windows = steward.windows()
    per_gpu = collections.defaultdict(list)
    for w in windows:
        per_gpu[w["gpu_uuid"]].append(parse_rfc3339(w["window_start"]))
    assert len(per_gpu) == 8
    for starts in per_gpu.values():
        # Minutes 0..74 sealed, each exactly once, in the order they happened. The agent
        # stopped at 11:15:00.000, the instant of its only look in 11:15: no second observed,
        # nothing sent for that minute.
        assert starts == [START + 60 * m for m in range(75)]
    assert all(
        w["samples_expected"] == 12 for w in windows if w["window_start"] < "2026-11-21T11:15"
    )
    outage = [r for r in steward.batch_requests() if r.status == 503]
    assert 5 <= len(outage) <= 60  # backed off, did not hammer the server for an hour
    delivered = [r for r in steward.batch_requests() if r.status in (200, 202)]
    first_after = min(r.at for r in delivered)
    assert back_at <= first_after <= back_at + 300  # back within one backoff cap
    assert len({r.batch_id for r in delivered}) == len(delivered)  # each batch sent once


def test_xid_events_are_delivered_within_seconds_not_at_the_window_boundary(
    make_node, steward, clock
):
    node = make_node("h100x8", steward)
    node.fake.at(START + 21.5, lambda f: f.inject_xid(6, 79, nvml=False))
    node.run_until(START + 50)
    (req,) = [
        r for r in steward.batch_requests() if any(e["kind"] == "xid" for e in r.doc["events"])
    ]
    assert req.at <= START + 24
    (xid,) = [e for e in req.doc["events"] if e["kind"] == "xid"]
    assert xid["occurred_at"] == "2026-11-21T10:00:21.500Z"  # dated when it happened
    assert xid["gpu_uuid"] == node.fake.gpus[6].uuid and req.doc["windows"] == []


def test_restart_mid_minute_never_sends_a_window_twice(make_node, steward, clock, tmp_path):
    node = make_node("h100x8", steward)
    node.run_until(START + 90)
    node.agent.shutdown()  # graceful: the partial 10:01 window goes out with 7 of 12 slots
    node.deliver_until(START + 95)
    clock.set(START + 100)
    node.agent = Agent(nvml=node.fake, clock=clock, spool=node.spool, config=node.config)
    node.run_until(START + 200)
    keys = [(w["gpu_uuid"], w["window_start"]) for w in steward.windows()]
    assert len(keys) == len(set(keys))
    minute1 = [w for w in steward.windows() if w["window_start"] == "2026-11-21T10:01:00Z"]
    assert {(w["samples_ok"], w["samples_expected"]) for w in minute1} == {(7, 7)}
    # Observed from its first look to the instant the agent stopped (10:01:30), not beyond.
    assert {(w["observed_from"], w["observed_to"]) for w in minute1} == {(0, 30)}
    minute2 = [w for w in steward.windows() if w["window_start"] == "2026-11-21T10:02:00Z"]
    assert {(w["observed_from"], w["observed_to"]) for w in minute2} == {(0, 60)}
    starts = sorted({w["window_start"] for w in steward.windows()})
    assert starts == ["2026-11-21T10:00:00Z", "2026-11-21T10:01:00Z", "2026-11-21T10:02:00Z"]


def test_crash_and_restart_loses_only_the_unsealed_minute(make_node, steward, clock):
    node = make_node("h100x8", steward)
    node.run_until(START + 150)
    # Crash: no shutdown. Reopen the spool file as a new process would.
    node.spool.close()
    spool = Spool(str(node.tmp / "spool.db"), clock=clock)
    node.spool = spool
    node.uploader.spool = spool
    node.agent = Agent(nvml=node.fake, clock=clock, spool=spool, config=node.config)
    node.run_until(START + 250)
    starts = collections.Counter(w["window_start"][11:16] for w in steward.windows())
    # 10:02 was in memory when the agent died; it restarts at 10:02:30 with 6 slots.
    assert starts == {"10:00": 8, "10:01": 8, "10:02": 8, "10:03": 8}
    partial = [w for w in steward.windows() if w["window_start"][11:16] == "10:02"]
    assert {w["samples_expected"] for w in partial} == {6}
    assert {(w["observed_from"], w["observed_to"]) for w in partial} == {(30, 60)}
