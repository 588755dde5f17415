"""Transport options, in both clients: TLS with a custom CA, a client
certificate (mTLS), a bearer token, extra headers and interceptors, against
servers started with the matching flags (holdfast.testing.run_server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

import holdfast
from holdfast.testing import HoldfastServer, run_server

from .conftest import eventually, key
from .test_behaviour import CountCalls

TOKEN = "py-transport-test-token-0123456789"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("py-client.example")
    files = {
        "ca": d / "ca.pem",
        "server_cert": d / "server.pem",
        "server_key": d / "server.key",
        "client_cert": d / "client.pem",
        "client_key": d / "client.key",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.cert_chain_pems[0].write_to_path(str(files["server_cert"]))
    server.private_key_pem.write_to_path(str(files["server_key"]))
    client.cert_chain_pems[0].write_to_path(str(files["client_cert"]))
    client.private_key_pem.write_to_path(str(files["client_key"]))
    return {k: str(v) for k, v in files.items()}


@pytest.fixture(scope="module")
def tls_server(certs: dict[str, str], server_binary: str) -> Iterator[HoldfastServer]:
    with run_server("--tls-cert", certs["server_cert"], "--tls-key", certs["server_key"], binary=server_binary) as s:
        yield s


@pytest.fixture(scope="module")
def mtls_server(certs: dict[str, str], server_binary: str) -> Iterator[HoldfastServer]:
    flags = ("--tls-cert", certs["server_cert"], "--tls-key", certs["server_key"], "--tls-client-ca", certs["ca"])
    with run_server(*flags, binary=server_binary) as s:
        yield s


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory, server_binary: str) -> Iterator[HoldfastServer]:
    tokens = tmp_path_factory.mktemp("auth") / "tokens.json"
    tokens.write_text(json.dumps([{"name": "py-test", "token": TOKEN, "prefixes": ["py/"]}]))
    with run_server("--auth-tokens", str(tokens), binary=server_binary) as s:
        yield s


async def test_tls_with_a_custom_ca(tls_server: HoldfastServer, certs: dict[str, str]) -> None:
    assert tls_server.address.startswith("https://")
    async with holdfast.AsyncClient(tls_server.address, ca_file=certs["ca"]) as c:
        g = await c.acquire(key("tls"), ttl=5)
        await g.unlock()
    with holdfast.Client(tls_server.address, ca_file=certs["ca"]) as s:
        s.acquire(key("tls-sync"), ttl=5).unlock()
    # Without the CA the server's certificate is not trusted.
    async with holdfast.AsyncClient(tls_server.address, retry_budget=0.3) as c:
        with pytest.raises(holdfast.UnavailableError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await c.inspect(key("tls"))


async def test_mtls_client_certificate(mtls_server: HoldfastServer, certs: dict[str, str]) -> None:
    ca, cert, key_file = certs["ca"], certs["client_cert"], certs["client_key"]
    async with holdfast.AsyncClient(mtls_server.address, ca_file=ca, cert_file=cert, key_file=key_file) as c:
        g = await c.acquire(key("mtls"), ttl=5)
        await g.unlock()
    with holdfast.Client(mtls_server.address, ca_file=ca, cert_file=cert, key_file=key_file) as s:
        s.acquire(key("mtls-sync"), ttl=5).unlock()
    async with holdfast.AsyncClient(mtls_server.address, ca_file=certs["ca"], retry_budget=0.3) as c:
        with pytest.raises(holdfast.UnavailableError):
            await c.inspect(key("mtls"))


def test_tls_options_are_checked_before_anything_is_sent(certs: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(holdfast.InvalidArgumentError, match="TLS options need an https:// address"):
        holdfast.AsyncClient("127.0.0.1:7410", ca_file=certs["ca"])
    with pytest.raises(holdfast.InvalidArgumentError, match="cert_file and key_file go together"):
        holdfast.AsyncClient("https://127.0.0.1:7410", cert_file=certs["client_cert"])
    with pytest.raises(holdfast.InvalidArgumentError, match="ca_file"):
        holdfast.AsyncClient("https://127.0.0.1:7410", ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(holdfast.InvalidArgumentError, match="cert_file"):
        holdfast.Client("https://127.0.0.1:7410", cert_file=certs["ca"], key_file=certs["ca"])


async def test_bearer_token(auth_server: HoldfastServer) -> None:
    async with holdfast.AsyncClient(auth_server.address, bearer_token=TOKEN) as c:
        g = await c.acquire(key("token"), ttl=5)
        await g.unlock()
        with pytest.raises(holdfast.PermissionDeniedError) as denied:
            await c.acquire("elsewhere/k", ttl=5)
        assert denied.value.code == "permission_denied"
    with holdfast.Client(auth_server.address, bearer_token=TOKEN) as s:
        s.acquire(key("token-sync"), ttl=5).unlock()
    async with holdfast.AsyncClient(auth_server.address) as c:
        with pytest.raises(holdfast.UnauthenticatedError) as ei:
            await c.acquire(key("token"), ttl=5)
        assert ei.value.code == "unauthenticated"


async def test_headers_and_interceptors(auth_server: HoldfastServer) -> None:
    # The token as a plain header proves extra headers reach the server.
    headers = {"Authorization": f"Bearer {TOKEN}"}
    counter = CountCalls()
    async with holdfast.AsyncClient(auth_server.address, headers=headers, interceptors=[counter]) as c:
        g = await c.acquire(key("headers"), ttl=5)
        await g.unlock()
    assert counter.calls[:1] == ["Acquire"] and "Release" in counter.calls
    sync_counter = CountCalls()
    with holdfast.Client(auth_server.address, headers=headers, interceptors=[sync_counter]) as s:
        s.acquire(key("headers-sync"), ttl=5).unlock()
    assert sync_counter.calls[:1] == ["Acquire"]
    with pytest.raises(holdfast.InvalidArgumentError, match="not both"):
        holdfast.AsyncClient(auth_server.address, headers=headers, bearer_token=TOKEN)


async def test_no_wait_set_queues_past_the_servers_max_wait(server_binary: str) -> None:
    # A server refuses a wait above its --max-wait: the SDK learns the cap
    # (GetServerInfo's max_wait) and re-sends Acquires of at most that.
    with run_server("--max-wait", "1s", binary=server_binary) as server:
        counter = CountCalls()
        async with (
            holdfast.AsyncClient(server.address) as holder,
            holdfast.AsyncClient(server.address, interceptors=[counter]) as waiter,
        ):
            k = key("max-wait")
            g = await holder.acquire(k, ttl=10)
            waiting = asyncio.ensure_future(waiter.acquire(k, ttl=10))
            await eventually(
                "two waits of the server's max_wait, after it refused a longer one",
                lambda: counter.calls[:2] == ["Acquire", "GetServerInfo"] and counter.calls.count("Acquire") >= 3,
                10,
            )
            assert not waiting.done()
            await g.unlock()
            got = await asyncio.wait_for(waiting, 5)
            assert got.held
            await got.unlock()
