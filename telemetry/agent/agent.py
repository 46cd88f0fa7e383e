"""The sampling loop: NVML lifecycle, 5-s samples, 60-s windows, events, sealing batches.

A window is finalized by the first read after its minute ends (that read brings the driver's
samples up to the boundary and the energy counter just past it), then sealed in the same
tick; a window whose next read never comes (GPU lost or missing, NVML down, shutdown) is
sealed with what it has.

Everything here runs on one thread, one `tick()` at a time, against an injected clock and an
injected NVML module (real ``pynvml`` or the fake), so a test can drive hours of node life in
milliseconds.  NVML calls themselves run on watchdog threads (one per GPU, one for the node).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .clock import Clock
from .events import AgentEvent, EventKind
from .kmsg import KernelLogReader, XidLine, pci_key
from .node import LOST, MISSING, PENDING, RESET, STALL, GpuTrack, handle_key
from .nvml_errors import ErrorAction, error_action, error_code, error_name
from .reader import UTIL_KINDS, NvmlModule, Reading, read_identity
from .schema import build_body
from .spool import Spool
from .watchdog import NvmlStall, Watchdog
from .windows import WindowBuilder, health_from_values, window_start
from .xid import classify_xid

log = logging.getLogger(__name__)

_KNOWN_KEY = "gpus.known"
LAST_WINDOW_KEY = "window.last"
_KMSG_KEY = "kmsg.cursor"


@dataclass(slots=True)
class AgentConfig:
    hostname: str = field(default_factory=socket.gethostname)
    interval_s: float = 5.0
    sample_timeout_s: float = 2.0  # one GPU's whole sample; NVML calls take microseconds
    init_timeout_s: float = 20.0  # nvmlInit and enumeration can take seconds on big nodes
    init_backoff_max_s: float = 60.0
    event_poll_s: float = 1.0
    enumerate_every_s: float = 60.0
    xid_dedupe_s: float = 10.0
    # Seal a batch once this many windows are pending (0: every tick). A backfill uses big
    # batches: fewer requests and worker claims for the same windows. Events seal at once.
    batch_windows: int = 0
    # Utilization from the driver's sample buffer where the GPU has one. A backfill at one
    # sample a minute turns it off: there, instantaneous reads cost far less to simulate.
    util_buffer: bool = True


class Agent:
    def __init__(
        self,
        *,
        nvml: NvmlModule,
        clock: Clock,
        spool: Spool,
        config: AgentConfig | None = None,
        kernel_log: KernelLogReader | None = None,
        on_batch: Callable[[], None] | None = None,
    ) -> None:
        self.nvml = nvml
        self.clock = clock
        self.spool = spool
        self.config = config or AgentConfig()
        self.kernel_log = kernel_log
        self.on_batch = on_batch
        self.node_wd = Watchdog("node")
        self.tracks: dict[str, GpuTrack] = {}
        # What each GPU does not support, by UUID: outlives handles, re-init and enumeration.
        self.unsupported: dict[str, set[str]] = {}
        self.known: dict[str, dict[str, Any]] = spool.get_state(_KNOWN_KEY) or {}
        self.last_window: dict[str, int] = spool.get_state(LAST_WINDOW_KEY) or {}
        self.by_handle: dict[int, str] = {}
        self.by_pci: dict[tuple[int, int, int], str] = {}
        self.pending_events: list[AgentEvent] = []
        self.pending_windows: list[dict[str, Any]] = []
        self.nvml_ready = False
        self.reinit_needed = False
        self.outage_since: float | None = None
        self.init_attempts = 0
        self.next_init_at = 0.0
        self.next_enumerate_at = 0.0
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        self.event_set: Any = None
        self._recent_xids: dict[tuple[str | None, int], tuple[float, str]] = {}
        self._known_dirty = False
        self.batches_sealed = 0
        interval = self.config.interval_s
        now = clock.now()
        self.next_slot = (int(now // interval) + (0 if now % interval == 0 else 1)) * interval
        for uuid, identity in self.known.items():
            # Known from an earlier run: they get windows (down) even if NVML never comes up,
            # and kernel-log XIDs map to them before the first enumeration.
            self._track(uuid, identity).condition = PENDING
            key = pci_key(identity.get("pci_bus_id") or "")
            if key is not None:
                self.by_pci[key] = uuid

    # -- the loop --------------------------------------------------------------------------

    def tick(self) -> float:
        """Do whatever is due now; returns the clock time of the next thing due."""
        now = self.clock.now()
        self._ensure_nvml(now)
        self._poll_events(now)
        while self.next_slot <= now:
            slot = self.next_slot
            self.next_slot += self.config.interval_s
            if now - slot < self.config.interval_s:
                if self.nvml_ready and now >= self.next_enumerate_at:
                    self._enumerate_guarded(now)
                self._sample(slot, now)
            else:
                self._expect_only(slot)  # overslept: the slot passed unsampled
        self._flush(now)
        due = min(self.next_slot, now + self.config.event_poll_s)
        if not self.nvml_ready:
            due = min(due, max(now, self.next_init_at))
        return due

    def run(self, stop: Any, until: float | None = None) -> None:
        """Tick until `stop` (a threading.Event) is set or the clock passes `until`."""
        while not stop.is_set():
            # Checked before ticking: a late wake-up must not open the window after `until`.
            if until is not None and self.clock.now() >= until:
                return
            due = self.tick()
            if until is not None:
                due = min(due, until)
            delay = due - self.clock.now()
            if delay > 0:
                self.clock.wait(stop, delay)

    def reconfigure(self, config: AgentConfig) -> None:
        """Seal what is pending and use `config` from now on (a backfill going live): sampling
        resumes at the next slot of the new interval; windows already open keep their counts.
        """
        self.flush()
        self.config = config
        now = self.clock.now()
        interval = config.interval_s
        self.next_slot = (int(now // interval) + (0 if now % interval == 0 else 1)) * interval

    def shutdown(self) -> None:
        """Seal what was sampled so far (partial windows say which seconds they observed)."""
        now = self.clock.now()
        for track in self.tracks.values():
            if track.closing is not None:
                self._seal(track, track.closing)
            if track.window is not None:
                self._seal(track, track.window, stopped_at=now)
        self._flush(now, force=True)
        for track in self.tracks.values():
            track.watchdog.close()
        self.node_wd.close()

    # -- NVML lifecycle ----------------------------------------------------------------------

    def _ensure_nvml(self, now: float) -> None:
        if self.nvml_ready or now < self.next_init_at:
            return
        try:
            self.node_wd.call(self._init_nvml, self.config.init_timeout_s, "nvmlInit")
        except NvmlStall as stall:
            self._nvml_down(now, "NvmlStall", None, str(stall))
            return
        except self.nvml.NVMLError as exc:
            self._nvml_down(now, error_name(exc), error_code(exc), str(exc))
            return
        self.nvml_ready = True
        self.reinit_needed = False
        self.init_attempts = 0
        if self.outage_since is not None:
            detail = {"after_s": round(now - self.outage_since, 3)}
            self._event("nvml_available", now, detail=detail)
            self.outage_since = None
        self._enumerate_guarded(now)

    def _init_nvml(self) -> None:
        nv = self.nvml
        if self.reinit_needed:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()  # the old session may be gone already (driver reloaded)
        nv.nvmlInit()
        self.driver_version = str(nv.nvmlSystemGetDriverVersion())
        try:
            cuda = int(nv.nvmlSystemGetCudaDriverVersion())
            self.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except nv.NVMLError:
            self.cuda_version = None
        self.event_set = None

    def _nvml_down(self, now: float, error: str, code: int | None, message: str) -> None:
        self.nvml_ready = False
        delay = min(self.config.init_backoff_max_s, float(2**self.init_attempts))
        self.init_attempts += 1
        self.next_init_at = now + delay
        if self.outage_since is None:
            self.outage_since = now
            log.error("NVML unavailable (%s: %s); retrying with backoff", error, message)
            detail = {"error": error, "code": code, "message": message}
            self._event("nvml_unavailable", now, detail=detail)

    def _lost_nvml(self, now: float, exc: BaseException) -> None:
        """A sample hit Uninitialized or a missing driver: re-init on the next tick."""
        log.warning("NVML lost its state (%s); re-initialising", error_name(exc))
        self.nvml_ready = False
        self.reinit_needed = True
        self.next_init_at = now
        if error_action(exc) is ErrorAction.UNAVAILABLE:
            self._nvml_down(now, error_name(exc), error_code(exc), str(exc))

    # -- enumeration -------------------------------------------------------------------------

    def _track(self, uuid: str, identity: dict[str, Any]) -> GpuTrack:
        track = self.tracks.get(uuid)
        if track is None:
            track = GpuTrack(
                uuid=uuid,
                identity=identity,
                watchdog=Watchdog(uuid[-8:]),
                unsupported=self.unsupported.setdefault(uuid, set()),
            )
            self.tracks[uuid] = track
        return track

    def _enumerate_guarded(self, now: float) -> None:
        self.next_enumerate_at = now + self.config.enumerate_every_s
        try:
            found, failed = self.node_wd.call(self._enumerate, self.config.init_timeout_s)
        except NvmlStall as stall:
            log.error("NVML enumeration stalled: %s", stall)
            return
        except self.nvml.NVMLError as exc:
            if error_action(exc) in (ErrorAction.REINIT, ErrorAction.UNAVAILABLE):
                self._lost_nvml(now, exc)
            else:
                log.warning("NVML enumeration failed: %s", error_name(exc))
            return
        self._reconcile(now, found, failed)

    def _enumerate(self) -> tuple[dict[str, tuple[Any, dict[str, Any]]], int]:
        nv = self.nvml
        found: dict[str, tuple[Any, dict[str, Any]]] = {}
        failed = 0
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = nv.nvmlDeviceGetUUID(handle)
                # Identity parts a card does not support are remembered like metrics.
                identity = read_identity(nv, handle, self.unsupported.setdefault(uuid, set()))
            except nv.NVMLError as exc:
                if error_action(exc) in (ErrorAction.REINIT, ErrorAction.UNAVAILABLE):
                    raise
                failed += 1  # e.g. a lost GPU that cannot even say its UUID
                continue
            found[identity["gpu_uuid"]] = (handle, identity)
        if self.event_set is None:
            try:
                self.event_set = nv.nvmlEventSetCreate()
            except nv.NVMLError as exc:
                log.warning("no NVML event set (%s); XIDs from the kernel log only", exc)
        return found, failed

    def _reconcile(
        self, now: float, found: dict[str, tuple[Any, dict[str, Any]]], failed: int
    ) -> None:
        for uuid, (handle, identity) in found.items():
            track = self._track(uuid, identity)
            track.identity = identity
            track.attach(self.nvml, handle, self.clock)
            self.by_handle[handle_key(handle)] = uuid
            key = pci_key(identity.get("pci_bus_id") or "")
            if key is not None:
                self.by_pci[key] = uuid
            if uuid not in self.known:
                self._event("gpu_appeared", now, uuid, detail={"identity": identity})
                self.known[uuid] = identity
                self._known_dirty = True
            elif track.condition == MISSING:
                self._event("gpu_appeared", now, uuid, detail={"identity": identity})
            elif self.known[uuid] != identity:
                self.known[uuid] = identity
                self._known_dirty = True
            if track.condition in (MISSING, PENDING):
                track.condition = "ok"
            self._register_events(track)
        # Cards that failed to enumerate (lost) keep their old handle for event mapping.
        self.by_handle = {
            handle_key(t.handle): uuid for uuid, t in self.tracks.items() if t.handle is not None
        }
        if failed:
            return  # some card could not identify itself: do not call anyone missing yet
        for uuid, track in self.tracks.items():
            if uuid not in found and track.condition != MISSING:
                since = track.condition_since if track.condition == LOST else now
                self._set_condition(track, MISSING, since)

    def _register_events(self, track: GpuTrack) -> None:
        nv = self.nvml
        if self.event_set is None or track.events_registered:
            return
        try:
            supported = nv.nvmlDeviceGetSupportedEventTypes(track.handle)
            mask = supported & nv.nvmlEventTypeXidCriticalError
            if mask:
                nv.nvmlDeviceRegisterEvents(track.handle, mask, self.event_set)
        except nv.NVMLError as exc:
            log.info("GPU %s: no NVML XID events (%s)", track.uuid, error_name(exc))
        track.events_registered = True

    # -- sampling ----------------------------------------------------------------------------

    def _window_for(self, track: GpuTrack, slot: float) -> WindowBuilder | None:
        start = window_start(slot)
        window = track.window
        if window is not None and window.start == start:
            return window
        if window is not None:
            track.window = None
            if window.looked:  # a minute without a look is not sent at all
                if track.closing is not None:
                    self._seal(track, track.closing)
                track.closing = window  # finalized by the next read
        if start <= self.last_window.get(track.uuid, -1):
            return None  # this minute was sealed before a restart: never send it twice
        track.window = WindowBuilder(track.uuid, start, buffered=self.config.util_buffer)
        return track.window

    def _expect_only(self, slot: float) -> None:
        """An overslept slot: it counts as expected, but it is no look."""
        for track in self.tracks.values():
            window = self._window_for(track, slot)
            if window is not None:
                window.expect()

    def _sample(self, slot: float, now: float) -> None:
        deadline = time.monotonic() + self.config.sample_timeout_s
        interval = self.config.interval_s
        jobs: list[tuple[GpuTrack, WindowBuilder, Any]] = []
        for track in list(self.tracks.values()):
            window = self._window_for(track, slot)
            if window is None:
                self._seal_closing(track)
                continue
            window.expect()
            if not self.nvml_ready:
                if self.outage_since is not None:
                    window.look(slot, interval)
                    window.note_state("down", "nvml_unavailable")
                self._seal_closing(track)
                continue
            if track.condition in (MISSING, PENDING) or track.reader is None:
                if track.condition == MISSING:
                    window.look(slot, interval)
                    window.note_state("down", MISSING)
                self._seal_closing(track)
                continue
            window.look(slot, interval)
            read = functools.partial(track.reader.read, window.buffered)
            try:
                job = track.watchdog.submit(read, "sample")
            except NvmlStall as stall:
                self._stalled(track, window, stall, now)
                self._seal_closing(track)
                continue
            jobs.append((track, window, job))
        # All GPUs are read in parallel, so one hung card costs one timeout, not one per card.
        for track, window, job in jobs:
            try:
                reading = track.watchdog.result(job, deadline, self.config.sample_timeout_s)
            except NvmlStall as stall:
                self._stalled(track, window, stall, now)
            except self.nvml.NVMLError as exc:
                self._sample_error(track, window, exc, now)
            else:
                if track.condition != "ok":
                    self._set_condition(track, "ok", now)
                state, reason = health_from_values(reading.values)
                window.add(reading.values, state, reason, reading.energy_at)
                self._take_samples(track, window, reading)
                if track.closing is not None:
                    track.closing.finalize(reading.values.get("energy_mj"), reading.energy_at)
            self._seal_closing(track)

    def _take_samples(self, track: GpuTrack, window: WindowBuilder, reading: Reading) -> None:
        """Turn the buffer's new samples into pieces, split between the minute that ended and
        the current one by time."""
        if reading.plans is None:
            return
        for i, kind in enumerate(UTIL_KINDS):
            instant = reading.instant[i] if reading.instant is not None else None
            pieces = track.streams[kind].take(reading.plans[kind], instant)
            if track.closing is not None:
                track.closing.add_pieces(kind, pieces)
            window.add_pieces(kind, pieces)

    def _stalled(
        self, track: GpuTrack, window: WindowBuilder, stall: NvmlStall, now: float
    ) -> None:
        window.note_state("down", STALL)
        if track.condition != STALL:
            log.error("GPU %s: NVML call %s stalled", track.uuid, stall.call)
            detail = {"call": stall.call, "timeout_s": stall.timeout_s}
            self._event("nvml_stall", now, track.uuid, detail=detail)
            track.condition, track.condition_since = STALL, now

    def _sample_error(
        self, track: GpuTrack, window: WindowBuilder, exc: BaseException, now: float
    ) -> None:
        action = error_action(exc)
        if action is ErrorAction.GPU_LOST:
            window.note_state("down", LOST)
            self._set_condition(track, LOST, now)
        elif action is ErrorAction.RESET_REQUIRED:
            window.note_state("down", RESET)
            self._set_condition(track, RESET, now)
        elif action in (ErrorAction.REINIT, ErrorAction.UNAVAILABLE):
            self._lost_nvml(now, exc)
        else:
            log.warning("GPU %s: sample failed (%s)", track.uuid, error_name(exc))

    def _set_condition(self, track: GpuTrack, condition: str, now: float) -> None:
        old, old_since = track.condition, track.condition_since
        if old == condition:
            return
        track.condition, track.condition_since = condition, now
        if condition in (LOST, RESET):
            self._event("gpu_lost", now, track.uuid, detail={"reason": condition})
        elif condition == MISSING:
            self._event("gpu_missing", now, track.uuid, detail={"identity": track.identity})
        elif condition == "ok" and old in (LOST, RESET, STALL):
            detail = {"from": old, "down_s": round(now - old_since, 3)}
            self._event("gpu_recovered", now, track.uuid, detail=detail)

    # -- events ------------------------------------------------------------------------------

    def _event(
        self,
        kind: EventKind,
        when: float,
        gpu_uuid: str | None = None,
        *,
        xid: int | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.pending_events.append(AgentEvent(kind, when, gpu_uuid, xid, detail or {}))

    def _poll_events(self, now: float) -> None:
        if self.nvml_ready and self.event_set is not None:
            try:
                for uuid, xid in self.node_wd.call(self._drain_nvml_events, 2.0, "events"):
                    self._xid(uuid, xid, now, "nvml", "")
            except NvmlStall:
                pass  # the sampler reports stalls; events will be read when it returns
            except self.nvml.NVMLError as exc:
                log.warning("NVML event wait failed (%s); kernel log only", error_name(exc))
                self.event_set = None
        if self.kernel_log is not None:
            for line in self.kernel_log.poll():
                self._kernel_xid(line)

    def _drain_nvml_events(self) -> list[tuple[str | None, int]]:
        nv = self.nvml
        out: list[tuple[str | None, int]] = []
        for _ in range(256):
            try:
                data = nv.nvmlEventSetWait_v2(self.event_set, 0)
            except nv.NVMLError as exc:
                if error_code(exc) == 10:  # NVML_ERROR_TIMEOUT: nothing (more) pending
                    break
                raise
            if data.eventType & nv.nvmlEventTypeXidCriticalError:
                uuid = self.by_handle.get(handle_key(data.device)) if data.device else None
                out.append((uuid, int(data.eventData)))
        return out

    def _kernel_xid(self, line: XidLine) -> None:
        uuid = self.by_pci.get(line.pci)
        self._xid(uuid, line.xid, line.occurred_at, "kmsg", line.message, line.pci)

    def _xid(
        self,
        uuid: str | None,
        code: int,
        when: float,
        source: str,
        message: str,
        pci: tuple[int, int, int] | None = None,
    ) -> None:
        # The same XID usually arrives through NVML and the kernel log: report it once.
        key = (uuid, code)
        seen = self._recent_xids.get(key)
        window_s = self.config.xid_dedupe_s
        if seen is not None and seen[1] != source and abs(when - seen[0]) <= window_s:
            return
        self._recent_xids[key] = (when, source)
        if len(self._recent_xids) > 1024:
            cutoff = when - self.config.xid_dedupe_s
            self._recent_xids = {k: v for k, v in self._recent_xids.items() if v[0] >= cutoff}
        info = classify_xid(code)
        detail: dict[str, Any] = {"severity": info.severity, "name": info.name, "source": source}
        if message:
            detail["message"] = message[:500]
        if pci is not None:
            detail["pci_bus_id"] = f"{pci[0]:08X}:{pci[1]:02X}:{pci[2]:02X}.0"
        self._event("xid", when, uuid, xid=code, detail=detail)
        track = self.tracks.get(uuid) if uuid else None
        windows = (track.window, track.closing) if track else ()
        for window in windows:
            if window is not None and window.start <= when < window.end:
                if info.severity == "down":
                    window.note_state("down", f"xid:{code}")
                elif info.severity == "degraded":
                    window.note_state("degraded", f"xid:{code}")

    # -- sealing -----------------------------------------------------------------------------

    def _seal_closing(self, track: GpuTrack) -> None:
        if track.closing is not None:
            self._seal(track, track.closing)

    def _seal(
        self, track: GpuTrack, window: WindowBuilder, stopped_at: float | None = None
    ) -> None:
        if track.closing is window:
            track.closing = None
        if track.window is window:
            track.window = None
        if not window.looked:
            return  # a minute without a look is not sent
        doc = window.wire(stopped_at)
        if doc["observed_from"] >= doc["observed_to"]:
            return  # stopped at the very instant of its only look: no second observed
        self.pending_windows.append(doc)
        self.last_window[track.uuid] = window.start

    def flush(self) -> None:
        """Seal whatever is pending now, however few windows (end of a backfill, shutdown)."""
        self._flush(self.clock.now(), force=True)

    def _flush(self, now: float, *, force: bool = False) -> None:
        if not self.pending_windows and not self.pending_events:
            return
        if not (force or self.pending_events) and (
            len(self.pending_windows) < self.config.batch_windows
        ):
            return
        windows, events = self.pending_windows, [e.to_wire() for e in self.pending_events]
        uuids = {w["gpu_uuid"] for w in windows} | {e["gpu_uuid"] for e in events}
        gpus = [self.known[u] for u in sorted(u for u in uuids if u in self.known)]
        agent = {
            "version": __version__,
            "hostname": self.config.hostname,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
        }

        def build(batch_id: str, extra: list[dict[str, Any]]) -> bytes:
            return build_body(
                batch_id=batch_id,
                sealed_at=now,
                agent=agent,
                gpus=gpus,
                windows=windows,
                events=events + extra,
            )

        state: dict[str, Any] = {LAST_WINDOW_KEY: self.last_window}
        if self._known_dirty:
            state[_KNOWN_KEY] = self.known
        if self.kernel_log is not None:
            state[_KMSG_KEY] = self.kernel_log.cursor()
        self.spool.seal(build, n_windows=len(windows), n_events=len(events), state=state)
        self._known_dirty = False
        self.pending_windows, self.pending_events = [], []
        self.batches_sealed += 1
        if self.on_batch is not None:
            self.on_batch()
