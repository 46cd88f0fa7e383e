"""Enrolment (bootstrap token -> node key) and the node key file (mode 0600)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .transport import HttpTransport, TransportError

log = logging.getLogger(__name__)

ENROL_PATH = "/api/v1/agents/enrol"


@dataclass(frozen=True, slots=True)
class Credentials:
    node_id: str
    node_key: str

    @property
    def key_bytes(self) -> bytes:
        # The key is an opaque ASCII string; its bytes are the HMAC key (no decoding step
        # that the agent and the server could disagree on).
        return self.node_key.encode("ascii")


class EnrolmentRejected(Exception):
    """The server refused the bootstrap token (used, expired, unknown): a person must act."""


class EnrolmentRetry(Exception):
    """The server could not answer now (network, 5xx, 429): try again later."""


def enrol(
    transport: HttpTransport,
    *,
    bootstrap_token: str,
    hostname: str,
    gpus: list[dict[str, Any]],
    agent_version: str,
) -> Credentials:
    payload = {
        "bootstrap_token": bootstrap_token,
        "hostname": hostname,
        "agent_version": agent_version,
        "gpus": gpus,
    }
    try:
        resp = transport.post(
            transport.path(ENROL_PATH),
            json.dumps(payload).encode(),
            {"Content-Type": "application/json", "Accept": "application/json"},
        )
    except TransportError as exc:
        raise EnrolmentRetry(str(exc)) from exc
    if resp.status == 201:
        data = json.loads(resp.body)
        return Credentials(node_id=str(data["node_id"]), node_key=str(data["node_key"]))
    text = resp.body[:500].decode("utf-8", "replace")
    if resp.status in (408, 429) or resp.status >= 500:
        raise EnrolmentRetry(f"HTTP {resp.status}: {text}")
    raise EnrolmentRejected(f"HTTP {resp.status}: {text}")


class KeyFile:
    """The node's credentials on disk; re-read when the file changes (re-enrolment)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._cached: Credentials | None = None

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> Credentials | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        stamp = (st.st_mtime_ns, st.st_ino)
        if stamp != self._stamp:
            if st.st_mode & 0o077:
                log.warning("key file %s is readable by others; it should be 0600", self.path)
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self._cached = Credentials(node_id=data["node_id"], node_key=data["node_key"])
            self._stamp = stamp
        return self._cached

    def write(self, creds: Credentials, *, server: str) -> None:
        """Atomically replace the key file; it is created 0600 and never exists wider."""
        directory = self.path.resolve().parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        doc = {
            "node_id": creds.node_id,
            "node_key": creds.node_key,
            "server": server,
            "enrolled_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        # O_EXCL with mode 0600: the secret is never in a file anyone else could open.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh)
                fh.flush()
                os.fsync(fh.fileno())
            tmp.chmod(0o600)
            tmp.replace(self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class CredentialSource:
    """The node key for the uploader: from the key file, else by enrolling (lazily, so a node
    that cannot reach the server at first start still samples and spools)."""

    def __init__(
        self,
        key_file: KeyFile,
        transport: HttpTransport,
        *,
        bootstrap_token: str | None,
        hostname: str,
        gpus: Any,  # () -> list of GPU identities, read when enrolling
        agent_version: str,
        now: Any,  # () -> float
        server: str,
    ) -> None:
        self.key_file = key_file
        self.transport = transport
        self.bootstrap_token = bootstrap_token
        self.hostname = hostname
        self.gpus = gpus
        self.agent_version = agent_version
        self.now = now
        self.server = server
        self.rejected: str | None = None
        self._next_try = 0.0
        self._attempt = 0

    def __call__(self) -> Credentials | None:
        creds = self.key_file.load()
        if creds is not None or self.bootstrap_token is None or self.rejected is not None:
            return creds
        now = self.now()
        if now < self._next_try:
            return None
        try:
            creds = enrol(
                self.transport,
                bootstrap_token=self.bootstrap_token,
                hostname=self.hostname,
                gpus=self.gpus(),
                agent_version=self.agent_version,
            )
        except EnrolmentRetry as exc:
            self._next_try = now + min(300.0, 2.0**self._attempt)
            self._attempt += 1
            log.warning("enrolment deferred: %s", exc)
            return None
        except EnrolmentRejected as exc:
            self.rejected = str(exc)
            log.error("enrolment refused (%s): a new bootstrap token is needed", exc)
            return None
        self.key_file.write(creds, server=self.server)
        log.info("enrolled as node %s; key written to %s", creds.node_id, self.key_file.path)
        return creds
