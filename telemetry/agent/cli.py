"""``steward-agent``: run the agent on a GPU node (real pynvml) or as a simulated node (--fake)."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .agent import LAST_WINDOW_KEY, Agent, AgentConfig
from .clock import CatchUpClock, Clock, RealClock, ScaledClock
from .credentials import (
    CredentialSource,
    EnrolmentRejected,
    EnrolmentRetry,
    KeyFile,
    enrol,
)
from .kmsg import KernelLogReader
from .spool import MAX_AGE_S, MAX_BYTES, Spool
from .timefmt import parse_rfc3339, rfc3339_seconds
from .transport import HttpTransport
from .uploader import Uploader
from .windows import window_start

if TYPE_CHECKING:
    from .fake.scenario import Scenario

log = logging.getLogger("steward-agent")

DEFAULT_DIR = Path("/var/lib/steward-agent")


def _duration(text: str) -> float:
    from .fake.scenario import parse_offset  # the same "90s / 12m / 1h" syntax

    return parse_offset(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="steward-agent", description="Steward's NVML agent (samples GPUs, ships telemetry)."
    )
    p.add_argument("--server", help="Steward base URL, e.g. https://steward.example.com")
    p.add_argument("--bootstrap-token", help="one-time token to enrol when no key file exists")
    p.add_argument("--key-file", default=str(DEFAULT_DIR / "node.key"), help="node key (0600)")
    p.add_argument("--spool", default=str(DEFAULT_DIR / "spool.db"), help="SQLite spool path")
    p.add_argument("--kmsg", help="kernel log to read XIDs from (default /dev/kmsg)")
    p.add_argument("--no-kmsg", action="store_true", help="do not read the kernel log")
    p.add_argument("--fake", metavar="SCENARIO", help="simulate a node from a scenario file/name")
    p.add_argument("--speed", type=float, default=1.0, help="fake clock speed (with --fake)")
    p.add_argument(
        "--start",
        help="fake clock start (RFC 3339, or 'scenario'); default: now, or now - duration "
        "when --speed > 1 so that a fast run fills the recent past",
    )
    p.add_argument(
        "--duration",
        type=_duration,
        help="stop after this much agent time (1h); with --backfill-from, of live time after it",
    )
    p.add_argument(
        "--backfill-from",
        metavar="WHEN",
        help="with --fake: start the simulated node at WHEN (RFC 3339, in the past), sample "
        "history as fast as the machine allows, then go on live",
    )
    p.add_argument(
        "--backfill-until",
        metavar="WHEN",
        help="with --backfill-from: stop there (RFC 3339), deliver and exit instead of going live",
    )
    p.add_argument(
        "--backfill-interval",
        type=float,
        default=60.0,
        help="sampling interval while backfilling, seconds (default 60: one sample a window)",
    )
    p.add_argument(
        "--backfill-batch",
        type=int,
        default=2000,
        help="windows per batch while backfilling (default 2000)",
    )
    p.add_argument("--once", action="store_true", help="sample one window, deliver, exit")
    p.add_argument("--interval", type=float, default=5.0, help="sampling interval, seconds")
    p.add_argument(
        "--hostname",
        help="the name to enrol as (default: the scenario's with --fake, else this machine's)",
    )
    p.add_argument("--enrol-only", action="store_true", help="enrol, write the key file, exit")
    p.add_argument("--force", action="store_true", help="with --enrol-only: replace a key file")
    p.add_argument("--ca-file", help="CA bundle for an HTTPS server")
    p.add_argument("--spool-max-mb", type=float, default=MAX_BYTES / (1024 * 1024))
    p.add_argument("--spool-max-age-h", type=float, default=MAX_AGE_S / 3600)
    p.add_argument("--drain-timeout", type=float, default=30.0, help="seconds to deliver at exit")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--version", action="version", version=f"steward-agent {__version__}")
    return p


def _agent_clock(args: argparse.Namespace, scenario: Any) -> Clock:
    if args.fake is None:
        return RealClock()
    now = time.time()
    if args.backfill_from:
        return CatchUpClock(float(window_start(parse_rfc3339(args.backfill_from))))
    if args.start == "scenario":
        start = scenario.start
    elif args.start:
        start = parse_rfc3339(args.start)
    elif args.speed > 1 and (args.duration or args.once):
        # A fast run backfills: it ends about now, so no window is dated in the future.
        span = 60.0 if args.once else float(args.duration)
        start = window_start(now - span * (1 + 1 / args.speed)) + 0.0
    else:
        start = float(window_start(now))
    return ScaledClock(start, args.speed)


def main(argv: list[str] | None = None, *, scenario: Scenario | None = None) -> int:
    """``steward-agent``. ``scenario``: with ``--fake``, this simulated node instead of the one
    ``--fake`` names (a caller that drives the fake cards itself, like scripts/gpu_truth.py)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.server is None:
        log.error("--server is required")
        return 2
    if args.backfill_from and (
        not args.fake or args.once or args.start or args.speed != 1.0 or args.enrol_only
    ):
        log.error("--backfill-from needs --fake and excludes --once, --start, --speed")
        return 2
    if args.backfill_until and not args.backfill_from:
        log.error("--backfill-until needs --backfill-from")
        return 2
    if not args.fake:
        scenario = None
    elif scenario is None:
        from .fake import load_scenario

        scenario = load_scenario(args.fake)
    if args.hostname is None:
        # A simulated node is the host its scenario describes, not the machine running it.
        args.hostname = scenario.hostname if scenario is not None else socket.gethostname()
    transport = HttpTransport(args.server, ca_file=args.ca_file)
    key_file = KeyFile(args.key_file)
    if args.enrol_only:
        return _enrol_only(args, transport, key_file)
    if not key_file.exists() and not args.bootstrap_token:
        log.error("no key file at %s and no --bootstrap-token to enrol with", args.key_file)
        return 2

    clock = _agent_clock(args, scenario)
    max_age_s = args.spool_max_age_h * 3600
    if scenario is not None:
        # Fault offsets count from the simulated node's start; a backfill's history is clean
        # and its faults happen once it is live.
        scenario.start = time.time() if isinstance(clock, CatchUpClock) else clock.now()
    if isinstance(clock, CatchUpClock):
        # Batches are aged by the simulated clock: history must not expire while it is sent.
        max_age_s += time.time() - clock.now()
    spool = Spool(
        args.spool,
        clock=clock,
        max_bytes=int(args.spool_max_mb * 1024 * 1024),
        max_age_s=max_age_s,
    )
    if isinstance(clock, CatchUpClock):
        # A rerun resumes after the last window it sealed instead of sampling it all again.
        sealed = spool.get_state(LAST_WINDOW_KEY) or {}
        if sealed:
            clock.skip_to(float(max(sealed.values()) + 60))
    nvml, kmsg_path = _nvml_and_kmsg(args, scenario, clock)
    kernel_log = None
    if kmsg_path is not None:
        try:
            kernel_log = KernelLogReader(
                kmsg_path, clock=clock, cursor=spool.get_state("kmsg.cursor")
            )
        except OSError as exc:
            log.warning(
                "cannot read kernel log %s (%s); XIDs from NVML events only", kmsg_path, exc
            )
    config = AgentConfig(hostname=args.hostname, interval_s=args.interval)
    live_config = config
    if isinstance(clock, CatchUpClock):
        step = args.backfill_interval
        config = AgentConfig(
            hostname=args.hostname,
            interval_s=step,
            event_poll_s=step,
            enumerate_every_s=max(step, 3600.0),
            batch_windows=args.backfill_batch,
            # History at one read a minute: simulating ~300 driver samples a minute per GPU
            # would cost more than the rest of the backfill, so it reads instantaneously.
            util_buffer=False,
        )
    agent = Agent(nvml=nvml, clock=clock, spool=spool, config=config, kernel_log=kernel_log)
    real = RealClock()  # the server's clock: request timestamps and retry waits are real
    creds = CredentialSource(
        key_file,
        transport,
        bootstrap_token=args.bootstrap_token,
        hostname=args.hostname,
        gpus=lambda: list(agent.known.copy().values()),  # read from the uploader thread
        agent_version=__version__,
        now=real.now,
        server=args.server,
    )
    uploader = Uploader(spool=spool, transport=transport, credentials=creds, clock=real)
    agent.on_batch = uploader.wake.set
    return _run(args, agent, uploader, clock, live_config)


def _nvml_and_kmsg(args: argparse.Namespace, scenario: Any, clock: Clock) -> tuple[Any, str | None]:
    if scenario is None:
        import pynvml

        kmsg = None if args.no_kmsg else (args.kmsg or "/dev/kmsg")
        return pynvml, kmsg
    kmsg = args.kmsg
    if kmsg is None and not args.no_kmsg:
        # The simulated node writes its kernel log next to the spool; the agent tails it.
        kmsg = str(Path(args.spool).with_suffix(".fake-kmsg.log"))
        Path(kmsg).write_text("")
    fake = scenario.build(clock, kernel_log_path=kmsg)
    return fake, kmsg


def _backfill(
    agent: Agent,
    clock: CatchUpClock,
    stop: threading.Event,
    live: AgentConfig,
    until: float | None,
) -> bool:
    """Samples history up to `until`, or else up to the current minute (which keeps moving)
    and then goes live; True if it went live."""
    began, first = time.monotonic(), clock.now()
    while not stop.is_set():
        target = float(window_start(time.time()))
        if until is not None:
            target = min(target, until)
        if clock.now() >= target:
            break
        agent.run(stop, until=min(target, clock.now() + 86_400))
        log.info("backfilled to %s", rfc3339_seconds(clock.now()))
    log.info(
        "backfilled %.1f days in %.1f s", (clock.now() - first) / 86_400, time.monotonic() - began
    )
    if stop.is_set() or until is not None:
        return False
    clock.go_live()
    agent.reconfigure(live)
    log.info("live from now")
    return True


def _run(
    args: argparse.Namespace,
    agent: Agent,
    uploader: Uploader,
    clock: Clock,
    live: AgentConfig | None = None,
) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()
        uploader.wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    until = None
    if args.once:
        until = float(window_start(clock.now()) + 60)  # the window we are in, to its end
    elif args.duration:
        until = clock.now() + args.duration
    if isinstance(clock, ScaledClock):
        clock.resume()
    sender = threading.Thread(target=uploader.run, args=(stop,), name="uploader", daemon=True)
    sender.start()
    log.info("agent %s started (%s)", __version__, f"fake: {args.fake}" if args.fake else "pynvml")
    try:
        if isinstance(clock, CatchUpClock):
            end = parse_rfc3339(args.backfill_until) if args.backfill_until else None
            if _backfill(agent, clock, stop, live or agent.config, end):
                until = None if args.duration is None else clock.now() + args.duration
                agent.run(stop, until=until)
        else:
            agent.run(stop, until=until)
    finally:
        agent.shutdown()
        stop.set()
        uploader.wake.set()
        # A POST in flight may take up to the transport timeout; never share its connection.
        sender.join(timeout=uploader.transport.timeout_s + 5)
    deadline = time.monotonic() + args.drain_timeout
    if sender.is_alive():
        log.error("uploader did not stop; leaving the spool for the next run")
        deadline = time.monotonic()
    while agent.spool.count() and time.monotonic() < deadline:
        due = uploader.pump()
        if uploader.status == "auth_failed":
            break
        time.sleep(max(0.0, min(due - time.time(), deadline - time.monotonic(), 1.0)))
    left = agent.spool.count()
    stats = uploader.stats
    log.info(
        "sealed %d batches; delivered %d (%d replays), dead-lettered %d, %d still spooled",
        agent.batches_sealed,
        stats.delivered,
        stats.replayed,
        stats.dead_lettered,
        left,
    )
    agent.spool.close()
    return 0 if left == 0 else 3


def _enrol_only(args: argparse.Namespace, transport: HttpTransport, key_file: KeyFile) -> int:
    if not args.bootstrap_token:
        log.error("--enrol-only needs --bootstrap-token")
        return 2
    if key_file.exists() and not args.force:
        log.error("%s exists; pass --force to replace it", key_file.path)
        return 2
    try:
        creds = enrol(
            transport,
            bootstrap_token=args.bootstrap_token,
            hostname=args.hostname,
            gpus=[],
            agent_version=__version__,
        )
    except (EnrolmentRejected, EnrolmentRetry) as exc:
        log.error("enrolment failed: %s", exc)
        return 1
    key_file.write(creds, server=args.server)
    log.info("enrolled as node %s", creds.node_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
