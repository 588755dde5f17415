"""The HTTP transport under the Connect runtime: httpx, on the caller's
event loop.

connectrpc sends its requests through a pyqwest ``Client``. pyqwest's own
transport (reqwest on a tokio runtime) reports each completion from a thread
of tokio's blocking pool, which calls ``loop.call_soon_threadsafe``; that
call releases the GIL to write the loop's wake-up byte. When the program
finishes in that window, the thread re-takes the GIL during interpreter
finalisation, CPython ends it with ``pthread_exit``, and the forced unwind
through Rust frames aborts the process (SIGABRT, sometimes SIGSEGV) after the
program's work is done. CPython before 3.14 offers no way out of that, and
pyqwest cannot wait for its blocking pool at exit. A pyqwest ``Client`` also
takes any object with an async ``execute(request)``: this one does the I/O
with httpx on the event loop's own thread, so no foreign thread ever runs
Python code.

httpx does not surface HTTP/2 trailers, which the gRPC protocol needs for its
status; Connect and gRPC-Web carry theirs in the body and work over HTTP/1.1.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence

import httpx
import pyqwest

from .errors import InvalidArgumentError

# Headers that describe the body as it travelled; the body handed to the
# Connect runtime is the decoded one.
_HOP_BY_HOP = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})


class HttpxTransport:
    """A pyqwest transport (``execute(request) -> Response``) over httpx.

    Every request carries ``headers`` in addition to its own. ``verify`` is
    an SSL context for ``https://`` servers (or True for httpx's default
    trust store).
    """

    def __init__(self, *, headers: Sequence[tuple[str, str]] = (), verify: ssl.SSLContext | bool = True) -> None:
        self._headers = tuple(headers)
        # The Connect runtime bounds every call itself (asyncio timeouts), so
        # httpx's own timeouts stay off; connections are not capped because a
        # waiting Acquire keeps one busy for as long as it queues.
        self._http = httpx.AsyncClient(
            timeout=None,
            verify=verify,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )

    async def execute(self, request: pyqwest.Request) -> pyqwest.Response:
        """Sends ``request`` and answers once the response headers arrived;
        the body streams from the returned response's ``content``."""
        headers = [*request.headers.items(), *self._headers]
        req = self._http.build_request(request.method, request.url, headers=headers, content=request.content)
        resp = await self._http.send(req, stream=True)
        return pyqwest.Response(
            status=resp.status_code,
            headers=pyqwest.Headers([(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _HOP_BY_HOP]),
            content=_body(resp),
            trailers=pyqwest.Headers(),
        )

    async def aclose(self) -> None:
        """Closes the pooled connections."""
        await self._http.aclose()


async def _body(resp: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.aiter_bytes():
            yield chunk
    finally:
        await resp.aclose()


def tls_verify(
    *,
    https: bool,
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
    ssl_context: ssl.SSLContext | None,
) -> ssl.SSLContext | bool:
    """What to verify an https:// server with: ``ssl_context`` as given, or a
    context trusting ``ca_file`` (default: httpx's trust store) and
    presenting ``cert_file``/``key_file`` (mTLS). Files are read here, so a
    missing or malformed one is an InvalidArgumentError naming it."""
    files = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
    given = [name for name, v in files.items() if v is not None]
    if (given or ssl_context is not None) and not https:
        raise InvalidArgumentError(
            f"holdfast: {', '.join(given) or 'ssl_context'}: TLS options need an https:// address"
        )
    if ssl_context is not None:
        if given:
            raise InvalidArgumentError(f"holdfast: give ssl_context or {', '.join(given)}, not both")
        return ssl_context
    if (cert_file is None) != (key_file is None):
        raise InvalidArgumentError("holdfast: cert_file and key_file go together (a client certificate and its key)")
    if not given:
        return True
    try:
        ctx = ssl.create_default_context(cafile=ca_file) if ca_file is not None else httpx.create_ssl_context()
    except (OSError, ssl.SSLError) as e:
        raise InvalidArgumentError(f"holdfast: ca_file {ca_file!r}: {e}") from e
    if cert_file is not None:
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as e:
            raise InvalidArgumentError(f"holdfast: cert_file {cert_file!r} / key_file {key_file!r}: {e}") from e
    return ctx
