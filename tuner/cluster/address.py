"""A Ray cluster's head as ``--address`` names it: the forms TuneFarm accepts, what
``ray.init`` and the dashboard need from each, and a reachability check before any work."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from tuner.errors import TuneFarmError

GCS_PORT = 6379  # Ray's defaults on the head node
DASHBOARD_PORT = 8265
CLIENT_PORT = 10001
ADDRESS_FORMS = (
    "HOST, HOST:PORT (the GCS, port 6379), ray://HOST:10001 or http://HOST:8265 (the dashboard)"
)


@dataclass(frozen=True)
class ClusterAddress:
    """A Ray cluster's head as given to ``--address``: ``scheme`` is None for a bare
    ``HOST[:PORT]`` (a GCS address, as ``ray start``/``ray status`` print), ``ray`` (Ray
    Client), ``http``/``https`` (the dashboard) or ``auto`` (the cluster this machine joined)."""

    scheme: str | None
    host: str
    port: int | None

    @property
    def gcs(self) -> str:
        """What ``ray.init`` takes: ``HOST:PORT`` (GCS port 6379 by default) or ``ray://``."""
        if self.scheme == "ray":
            return f"ray://{self.host}:{self.port or CLIENT_PORT}"
        bare = self.scheme is None and self.port not in (None, DASHBOARD_PORT)
        port = self.port if bare else GCS_PORT
        return f"{self.host}:{port}"

    @property
    def dashboard(self) -> str:
        """The dashboard's URL (port 8265 unless an http(s) URL names another)."""
        if self.scheme in ("http", "https"):
            port = f":{self.port}" if self.port else ""
            return f"{self.scheme}://{self.host}{port}"
        return f"http://{self.host}:{DASHBOARD_PORT}"


def parse_address(text: str) -> ClusterAddress:
    """Parse ``--address`` (see :data:`ADDRESS_FORMS`); ``auto`` is resolved from the cluster
    this machine joined with ``ray start``."""
    text = text.strip().rstrip("/")
    if text == "auto":
        return _auto_address()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    if scheme not in ("", "ray", "http", "https"):
        raise TuneFarmError(
            f"unsupported address {text!r}: give the Ray cluster's head as {ADDRESS_FORMS}"
        )
    host, colon, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    if colon and not (port.isdigit() and 0 < int(port) < 65536):
        raise TuneFarmError(f"bad port in address {text!r}: expected {ADDRESS_FORMS}")
    host = host.strip("[]")
    if not host or "/" in host or " " in host:
        raise TuneFarmError(f"bad host in address {text!r}: expected {ADDRESS_FORMS}")
    return ClusterAddress(scheme or None, host, int(port) if colon else None)


def _auto_address() -> ClusterAddress:
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except Exception:
        found = None
    if not found:
        raise TuneFarmError(
            "--address auto: this machine has not joined a Ray cluster (`ray start`); "
            f"give the head's address instead: {ADDRESS_FORMS}"
        )
    return parse_address(found)


def check_reachable(host: str, port: int, what: str, timeout: float = 5.0) -> None:
    """Fail in one line when nothing accepts a TCP connection at ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise TuneFarmError(
            f"cannot reach the Ray cluster's {what} at {host}:{port}: {reason}"
        ) from None


def ray_address(address: str | None) -> str | None:
    """``--address`` of ``tune``/``bench`` as ``ray.init`` takes it, checked to answer before
    any work; None (start a local Ray instance) without one or for ``local``."""
    if address is None or address.strip() == "local":
        return None
    addr = parse_address(address)
    if addr.scheme == "ray":
        check_reachable(addr.host, addr.port or CLIENT_PORT, "Ray Client server")
    else:
        check_reachable(addr.host, int(addr.gcs.rpartition(":")[2]), "GCS")
    return addr.gcs
