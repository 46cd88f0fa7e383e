"""The SSRF guard: webhooks go to public addresses only.

A URL is refused unless its scheme is https (http too where ``WEBHOOK_ALLOW_HTTP``: development
and tests), it has a host and no credentials, and **every** address its host resolves to is
public: not loopback (allowed only where ``WEBHOOK_ALLOW_LOOPBACK``: tests), private,
link-local (cloud metadata at 169.254.169.254), multicast, reserved, unspecified, shared
(100.64/10) or otherwise not global. The check runs when an endpoint is registered or changed
and again before every request, after resolving the name; the request then connects to the
address that was checked, so a name that re-resolves elsewhere (DNS rebinding) gains nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeUrl(ValueError):
    """The URL may not receive webhooks; the message says why."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as written (sent as Host and used for TLS)
    port: int
    path: str  # path and query, at least "/"
    address: str  # the checked IP address to connect to


def _refusal(ip: IPAddress) -> str | None:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return _refusal(ip.ipv4_mapped)
    if ip.is_loopback:
        return None if settings.WEBHOOK_ALLOW_LOOPBACK else "a loopback address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_reserved:
        return "a reserved address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "an address that is not public"
    return None


def _split(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise UnsafeUrl(f"The URL is not valid: {error}.") from error
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsafeUrl("Use an https:// URL.")
    if scheme == "http" and not settings.WEBHOOK_ALLOW_HTTP:
        raise UnsafeUrl("Use an https:// URL; plain http:// is not accepted.")
    if parts.username is not None or parts.password is not None:
        raise UnsafeUrl("Do not put credentials in the URL.")
    host = parts.hostname or ""
    if not host:
        raise UnsafeUrl("The URL has no host.")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port or (443 if scheme == "https" else 80), path


def url_check(url: str) -> Target:
    """Resolves the URL's host and returns where to connect, or raises ``UnsafeUrl``."""
    scheme, host, port, path = _split(url)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as error:
            raise UnsafeUrl(f"The host {host} does not resolve.") from error
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        if not addresses:
            raise UnsafeUrl(f"The host {host} does not resolve.")
    for ip in addresses:
        reason = _refusal(ip)
        if reason is not None:
            shown = host if literal is not None else f"{host} ({ip})"
            raise UnsafeUrl(f"The host {shown} is {reason}; webhooks go to public addresses only.")
    return Target(scheme=scheme, host=host, port=port, path=path, address=str(addresses[0]))
