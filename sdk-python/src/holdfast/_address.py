"""The server address a client takes: ``http://host:port``,
``https://host:port``, or a bare ``host:port`` meaning ``http://host:port``."""

from __future__ import annotations

from urllib.parse import urlsplit

from .errors import InvalidArgumentError

_FORMS = "http://host:port, https://host:port or host:port"


def base_url(address: object) -> str:
    """The base URL the Connect runtime sends to; InvalidArgumentError naming
    the address for anything else."""
    if not isinstance(address, str) or not address or address != address.strip():
        raise InvalidArgumentError(f"holdfast: address {address!r}: want {_FORMS}")
    bare = "://" not in address
    url = urlsplit(f"http://{address}" if bare else address)
    try:
        port = url.port
    except ValueError as e:
        raise InvalidArgumentError(f"holdfast: address {address!r}: {e}") from None
    if url.scheme not in ("http", "https"):
        raise InvalidArgumentError(f"holdfast: address {address!r}: scheme {url.scheme!r}: want {_FORMS}")
    if not url.hostname:
        raise InvalidArgumentError(f"holdfast: address {address!r}: no host: want {_FORMS}")
    if bare and port is None:
        raise InvalidArgumentError(f"holdfast: address {address!r}: no port: want {_FORMS}")
    if url.path not in ("", "/") or url.query or url.fragment or url.username is not None:
        raise InvalidArgumentError(f"holdfast: address {address!r}: only a scheme, host and port: want {_FORMS}")
    return f"{url.scheme}://{url.netloc}"
