"""Tests that need no server: the HLC port, validate_write, durations,
addresses, backoff, the expiry margin and error codes."""

from __future__ import annotations

import datetime
import math
import re

import pytest

import holdfast
from holdfast import (
    Backoff,
    Clock,
    ClockOffsetError,
    ExpiryMargin,
    InvalidArgumentError,
    RunResult,
    StaleTokenError,
    Timestamp,
    _durations,
    validate_write,
)
from holdfast._address import base_url


def test_now_strictly_increases_when_the_clock_stalls_or_goes_back() -> None:
    pt = [1_000]
    c = Clock(physical=lambda: pt[0])
    a, b = c.now(), c.now()
    pt[0] = 500
    d = c.now()
    assert a < b < d
    pt[0] = 2_000
    assert c.now() == Timestamp(2_000, 0)


def test_update_moves_past_the_remote_stamp() -> None:
    c = Clock(physical=lambda: 1_000, max_offset=1e-3)
    c.now()
    remote = Timestamp(1_500, 7)
    assert c.update(remote) == Timestamp(1_500, 8)
    assert c.update(Timestamp(1_500, 3)) == Timestamp(1_500, 9)
    assert c.update(Timestamp()) == Timestamp(1_500, 10)


def test_update_refuses_beyond_max_offset_without_advancing() -> None:
    c = Clock(physical=lambda: 1_000_000_000, max_offset=0.5)
    before = c.now()
    with pytest.raises(ClockOffsetError):
        c.update(Timestamp(1_000_000_000 + 600_000_000, 0))
    assert c.last() == before
    assert c.observe(Timestamp(5_000_000_000, 0)) > Timestamp(5_000_000_000, 0)


def test_next_carries_a_full_logical_counter() -> None:
    assert Timestamp(5, 0xFFFF_FFFF).next() == Timestamp(6, 0)


def test_wire_round_trip() -> None:
    assert Timestamp().to_proto() is None
    t = Timestamp(123, 4)
    assert Timestamp.from_proto(t.to_proto()) == t


def test_validate_write_returns_the_new_watermark() -> None:
    assert validate_write(5, 5) == 5
    assert validate_write(9, 5) == 9
    big = 2**64 - 1
    assert validate_write(big, big - 1) == big
    with pytest.raises(StaleTokenError) as ei:
        validate_write(4, 5)
    assert (ei.value.token, ei.value.watermark, ei.value.code) == (4, 5, "stale_token")


# ---- durations (docs/sdk-behaviour.md, Durations and validation) ----


def test_durations_are_seconds_or_timedelta() -> None:
    assert _durations.ttl(3) == 3.0
    assert _durations.ttl(datetime.timedelta(milliseconds=250)) == 0.25
    assert _durations.wait(None) is None
    assert _durations.wait(0) == 0.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0.003, "ttl: 3ms is below the SDK minimum 100ms (Python durations are seconds)"),
        (datetime.timedelta(milliseconds=50), "ttl: 50ms is below the SDK minimum 100ms"),
        (-1, "ttl: -1s is below the SDK minimum 100ms"),
        (math.inf, "ttl: inf is not a finite duration"),
        (math.nan, "ttl: NaN is not a duration"),
        ("30s", "ttl: '30s' is not a duration: give seconds (int or float) or a datetime.timedelta"),
        (True, "ttl: True is not a duration"),
    ],
)
def test_ttl_out_of_range_names_field_value_unit_and_limit(value: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as ei:
        _durations.ttl(value)
    assert ei.value.code == "invalid_argument"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.5, "wait: -500ms is negative: give 0 for one attempt, or None to queue until acquired"),
        (math.inf, "wait: inf is not a finite duration: give None to queue until acquired or cancelled"),
    ],
)
def test_wait_must_be_finite_and_not_negative(value: float, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        _durations.wait(value)


# ---- addresses ----


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("127.0.0.1:7410", "http://127.0.0.1:7410"),
        ("localhost:7410", "http://localhost:7410"),
        ("[::1]:7410", "http://[::1]:7410"),
        ("http://127.0.0.1:7410", "http://127.0.0.1:7410"),
        ("https://locks.example.com:443/", "https://locks.example.com:443"),
        ("https://locks.example.com", "https://locks.example.com"),
    ],
)
def test_addresses(address: str, url: str) -> None:
    assert base_url(address) == url


@pytest.mark.parametrize(
    "address",
    ["", "localhost", "ftp://x:1", "http://:7410", "127.0.0.1:99999", "http://h:1/path", " 127.0.0.1:7410", "h:1?q"],
)
def test_bad_addresses_name_the_address(address: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(repr(address))):
        base_url(address)


def test_a_client_refuses_a_bad_address_before_sending() -> None:
    with pytest.raises(InvalidArgumentError, match="address 'localhost'"):
        holdfast.AsyncClient("localhost")


# ---- backoff and expiry margin ----


def test_backoff_is_exponential_with_equal_jitter_capped_at_1s() -> None:
    b = Backoff()
    assert [b.ceiling(n) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for n in range(8):
        d = b.ceiling(n)
        for _ in range(50):
            assert d / 2 <= b.delay(n) <= d


def test_expiry_margin_defaults_to_a_hundredth_of_the_ttl_plus_20ms() -> None:
    m = ExpiryMargin()
    assert m.of(15) == pytest.approx(0.17)
    assert m.of(0.1) == pytest.approx(0.021)
    with pytest.raises(InvalidArgumentError, match="expiry_margin"):
        ExpiryMargin(fixed=1).check(1.2)


# ---- errors ----


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (holdfast.NotAcquiredError("k", None), "not_acquired"),
        (holdfast.LeaseLostError("k", "expired", 1), "lease_lost"),
        (holdfast.LockReleasedError("k"), "lock_released"),
        (holdfast.ClientClosedError(), "client_closed"),
        (StaleTokenError(1, 2), "stale_token"),
        (ClockOffsetError("x"), "clock_offset"),
        (holdfast.UnavailableError("x"), "unavailable"),
        (holdfast.DeadlineExceededError("x"), "deadline_exceeded"),
        (holdfast.UnauthenticatedError("x"), "unauthenticated"),
        (holdfast.PermissionDeniedError("x"), "permission_denied"),
    ],
)
def test_every_error_has_its_code(err: holdfast.HoldfastError, code: str) -> None:
    assert err.code == code


def test_server_codes_map_to_classes_and_keep_the_code() -> None:
    from connectrpc.code import Code
    from connectrpc.errors import ConnectError

    from holdfast.errors import from_connect_error

    e = from_connect_error(ConnectError(Code.FAILED_PRECONDITION, "no"), "acquire 'k'")
    assert isinstance(e, holdfast.ServerError) and e.code == "failed_precondition"
    e = from_connect_error(ConnectError(Code.PERMISSION_DENIED, "no"), "acquire 'k'")
    assert isinstance(e, holdfast.PermissionDeniedError) and e.code == "permission_denied"
    e = from_connect_error(OSError("refused"), "acquire 'k'")
    assert isinstance(e, holdfast.UnavailableError) and e.code == "unavailable"


def test_run_result_is_a_named_tuple() -> None:
    ran, value = RunResult(True, 7)
    assert ran and value == 7
    assert RunResult(False) == (False, None)


def test_the_package_has_no_import_cycles() -> None:
    """Every intra-package import, TYPE_CHECKING ones included, forms a DAG."""
    import ast
    from pathlib import Path

    root = Path(holdfast.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        mod = path.stem
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)
        graph[mod] = {d for d in deps if (root / f"{d}.py").exists() and d != mod}

    def visit(mod: str, stack: list[str], done: set[str]) -> None:
        if mod in stack:
            pytest.fail(f"import cycle: {' -> '.join([*stack[stack.index(mod) :], mod])}")
        if mod in done:
            return
        for dep in sorted(graph[mod]):
            visit(dep, [*stack, mod], done)
        done.add(mod)

    done: set[str] = set()
    for mod in sorted(graph):
        visit(mod, [], done)
    assert {"errors", "hlc", "types"} <= graph.keys()
