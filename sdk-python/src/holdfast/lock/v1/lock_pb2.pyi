import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_UNSPECIFIED: _ClassVar[Kind]
    KIND_MUTEX: _ClassVar[Kind]
    KIND_SEMAPHORE: _ClassVar[Kind]
    KIND_RWLOCK: _ClassVar[Kind]
    KIND_ELECTION: _ClassVar[Kind]

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_SHARED: _ClassVar[Mode]
    MODE_EXCLUSIVE: _ClassVar[Mode]

class Capability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPABILITY_UNSPECIFIED: _ClassVar[Capability]
    CAPABILITY_MULTI_KEY: _ClassVar[Capability]
    CAPABILITY_REQUEST_ID: _ClassVar[Capability]
    CAPABILITY_LOCK_DELAY: _ClassVar[Capability]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_ACQUIRED: _ClassVar[EventType]
    EVENT_TYPE_RELEASED: _ClassVar[EventType]
    EVENT_TYPE_EXPIRED: _ClassVar[EventType]
    EVENT_TYPE_SYNCED: _ClassVar[EventType]
    EVENT_TYPE_PROCLAIMED: _ClassVar[EventType]
KIND_UNSPECIFIED: Kind
KIND_MUTEX: Kind
KIND_SEMAPHORE: Kind
KIND_RWLOCK: Kind
KIND_ELECTION: Kind
MODE_UNSPECIFIED: Mode
MODE_SHARED: Mode
MODE_EXCLUSIVE: Mode
CAPABILITY_UNSPECIFIED: Capability
CAPABILITY_MULTI_KEY: Capability
CAPABILITY_REQUEST_ID: Capability
CAPABILITY_LOCK_DELAY: Capability
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_ACQUIRED: EventType
EVENT_TYPE_RELEASED: EventType
EVENT_TYPE_EXPIRED: EventType
EVENT_TYPE_SYNCED: EventType
EVENT_TYPE_PROCLAIMED: EventType

class HlcTimestamp(_message.Message):
    __slots__ = ("wall_time_ns", "logical")
    WALL_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_FIELD_NUMBER: _ClassVar[int]
    wall_time_ns: int
    logical: int
    def __init__(self, wall_time_ns: _Optional[int] = ..., logical: _Optional[int] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("key", "owner_token", "fencing_token", "ttl", "expires_at", "stamp", "keys", "lock_delay", "kind", "limit", "permits", "mode", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    STAMP_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner_token: str
    fencing_token: int
    ttl: _duration_pb2.Duration
    expires_at: _timestamp_pb2.Timestamp
    stamp: HlcTimestamp
    keys: _containers.RepeatedCompositeFieldContainer[LeasedKey]
    lock_delay: _duration_pb2.Duration
    kind: Kind
    limit: int
    permits: int
    mode: Mode
    value: str
    def __init__(self, key: _Optional[str] = ..., owner_token: _Optional[str] = ..., fencing_token: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., keys: _Optional[_Iterable[_Union[LeasedKey, _Mapping]]] = ..., lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., kind: _Optional[_Union[Kind, str]] = ..., limit: _Optional[int] = ..., permits: _Optional[int] = ..., mode: _Optional[_Union[Mode, str]] = ..., value: _Optional[str] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("fencing_token", "holder", "expires_at", "stamp", "permits", "mode", "lock_delay", "value")
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    STAMP_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    fencing_token: int
    holder: str
    expires_at: _timestamp_pb2.Timestamp
    stamp: HlcTimestamp
    permits: int
    mode: Mode
    lock_delay: _duration_pb2.Duration
    value: str
    def __init__(self, fencing_token: _Optional[int] = ..., holder: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., permits: _Optional[int] = ..., mode: _Optional[_Union[Mode, str]] = ..., lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., value: _Optional[str] = ...) -> None: ...

class LeasedKey(_message.Message):
    __slots__ = ("key", "fencing_token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    fencing_token: int
    def __init__(self, key: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class KeyDelay(_message.Message):
    __slots__ = ("key", "until", "remaining")
    KEY_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    key: str
    until: _timestamp_pb2.Timestamp
    remaining: _duration_pb2.Duration
    def __init__(self, key: _Optional[str] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., remaining: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LockState(_message.Message):
    __slots__ = ("key", "fencing_token", "holder", "expires_at", "stamp", "waiters", "lock_delay", "kind", "limit", "permits_in_use", "holders")
    KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    STAMP_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERMITS_IN_USE_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    key: str
    fencing_token: int
    holder: str
    expires_at: _timestamp_pb2.Timestamp
    stamp: HlcTimestamp
    waiters: int
    lock_delay: _duration_pb2.Duration
    kind: Kind
    limit: int
    permits_in_use: int
    holders: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, key: _Optional[str] = ..., fencing_token: _Optional[int] = ..., holder: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., waiters: _Optional[int] = ..., lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., kind: _Optional[_Union[Kind, str]] = ..., limit: _Optional[int] = ..., permits_in_use: _Optional[int] = ..., holders: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class BackendInfo(_message.Message):
    __slots__ = ("name", "version", "shared", "durable", "ttl_granularity", "min_ttl", "max_ttl", "fair", "capabilities", "max_keys", "max_lock_delay", "kinds", "max_limit", "rwlock_readers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    TTL_GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    MIN_TTL_FIELD_NUMBER: _ClassVar[int]
    MAX_TTL_FIELD_NUMBER: _ClassVar[int]
    FAIR_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    MAX_KEYS_FIELD_NUMBER: _ClassVar[int]
    MAX_LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    MAX_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RWLOCK_READERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    shared: bool
    durable: bool
    ttl_granularity: _duration_pb2.Duration
    min_ttl: _duration_pb2.Duration
    max_ttl: _duration_pb2.Duration
    fair: bool
    capabilities: _containers.RepeatedScalarFieldContainer[Capability]
    max_keys: int
    max_lock_delay: _duration_pb2.Duration
    kinds: _containers.RepeatedScalarFieldContainer[Kind]
    max_limit: int
    rwlock_readers: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., shared: _Optional[bool] = ..., durable: _Optional[bool] = ..., ttl_granularity: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., min_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fair: _Optional[bool] = ..., capabilities: _Optional[_Iterable[_Union[Capability, str]]] = ..., max_keys: _Optional[int] = ..., max_lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., kinds: _Optional[_Iterable[_Union[Kind, str]]] = ..., max_limit: _Optional[int] = ..., rwlock_readers: _Optional[int] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("key", "ttl", "wait", "holder", "client_stamp", "claims", "request_id", "lock_delay", "kind", "limit", "permits", "mode", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_STAMP_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    ttl: _duration_pb2.Duration
    wait: _duration_pb2.Duration
    holder: str
    client_stamp: HlcTimestamp
    claims: _containers.RepeatedCompositeFieldContainer[Claim]
    request_id: str
    lock_delay: _duration_pb2.Duration
    kind: Kind
    limit: int
    permits: int
    mode: Mode
    value: str
    def __init__(self, key: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., holder: _Optional[str] = ..., client_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., claims: _Optional[_Iterable[_Union[Claim, _Mapping]]] = ..., request_id: _Optional[str] = ..., lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., kind: _Optional[_Union[Kind, str]] = ..., limit: _Optional[int] = ..., permits: _Optional[int] = ..., mode: _Optional[_Union[Mode, str]] = ..., value: _Optional[str] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("acquired", "lease", "current", "server_stamp", "delayed")
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    lease: Lease
    current: LockState
    server_stamp: HlcTimestamp
    delayed: KeyDelay
    def __init__(self, acquired: _Optional[bool] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., current: _Optional[_Union[LockState, _Mapping]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., delayed: _Optional[_Union[KeyDelay, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("key", "owner_token", "client_stamp", "keys", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLIENT_STAMP_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner_token: str
    client_stamp: HlcTimestamp
    keys: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    def __init__(self, key: _Optional[str] = ..., owner_token: _Optional[str] = ..., client_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., keys: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released", "server_stamp")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    released: bool
    server_stamp: HlcTimestamp
    def __init__(self, released: _Optional[bool] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class ExtendRequest(_message.Message):
    __slots__ = ("key", "owner_token", "ttl", "client_stamp", "keys", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_STAMP_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner_token: str
    ttl: _duration_pb2.Duration
    client_stamp: HlcTimestamp
    keys: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    def __init__(self, key: _Optional[str] = ..., owner_token: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., client_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., keys: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ExtendResponse(_message.Message):
    __slots__ = ("extended", "lease", "server_stamp")
    EXTENDED_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    extended: bool
    lease: Lease
    server_stamp: HlcTimestamp
    def __init__(self, extended: _Optional[bool] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class ProclaimRequest(_message.Message):
    __slots__ = ("key", "owner_token", "value", "client_stamp")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_STAMP_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner_token: str
    value: str
    client_stamp: HlcTimestamp
    def __init__(self, key: _Optional[str] = ..., owner_token: _Optional[str] = ..., value: _Optional[str] = ..., client_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class ProclaimResponse(_message.Message):
    __slots__ = ("proclaimed", "lease", "server_stamp")
    PROCLAIMED_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    proclaimed: bool
    lease: Lease
    server_stamp: HlcTimestamp
    def __init__(self, proclaimed: _Optional[bool] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class ExtendBatchRequest(_message.Message):
    __slots__ = ("items", "client_stamp")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_STAMP_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ExtendBatchItem]
    client_stamp: HlcTimestamp
    def __init__(self, items: _Optional[_Iterable[_Union[ExtendBatchItem, _Mapping]]] = ..., client_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class ExtendBatchItem(_message.Message):
    __slots__ = ("key", "owner_token", "ttl", "request_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    owner_token: str
    ttl: _duration_pb2.Duration
    request_id: str
    def __init__(self, key: _Optional[str] = ..., owner_token: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ExtendBatchResponse(_message.Message):
    __slots__ = ("results", "server_stamp")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ExtendBatchResult]
    server_stamp: HlcTimestamp
    def __init__(self, results: _Optional[_Iterable[_Union[ExtendBatchResult, _Mapping]]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class ExtendBatchResult(_message.Message):
    __slots__ = ("extended", "lease", "error")
    EXTENDED_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    extended: bool
    lease: Lease
    error: ItemError
    def __init__(self, extended: _Optional[bool] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class InspectRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class InspectResponse(_message.Message):
    __slots__ = ("held", "state", "server_stamp", "delayed")
    HELD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    held: bool
    state: LockState
    server_stamp: HlcTimestamp
    delayed: KeyDelay
    def __init__(self, held: _Optional[bool] = ..., state: _Optional[_Union[LockState, _Mapping]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., delayed: _Optional[_Union[KeyDelay, _Mapping]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("locks", "next_page_token", "server_stamp")
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    locks: _containers.RepeatedCompositeFieldContainer[LockState]
    next_page_token: str
    server_stamp: HlcTimestamp
    def __init__(self, locks: _Optional[_Iterable[_Union[LockState, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("key", "prefix")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    key: str
    prefix: str
    def __init__(self, key: _Optional[str] = ..., prefix: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("type", "state", "server_stamp")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    type: EventType
    state: LockState
    server_stamp: HlcTimestamp
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., state: _Optional[_Union[LockState, _Mapping]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("leader", "server_stamp")
    LEADER_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    leader: Leader
    server_stamp: HlcTimestamp
    def __init__(self, leader: _Optional[_Union[Leader, _Mapping]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class Leader(_message.Message):
    __slots__ = ("key", "term", "holder", "value", "expires_at", "stamp")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    STAMP_FIELD_NUMBER: _ClassVar[int]
    key: str
    term: int
    holder: str
    value: str
    expires_at: _timestamp_pb2.Timestamp
    stamp: HlcTimestamp
    def __init__(self, key: _Optional[str] = ..., term: _Optional[int] = ..., holder: _Optional[str] = ..., value: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("version", "backend", "server_stamp", "max_clock_offset", "max_wait")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SERVER_STAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_CLOCK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    version: str
    backend: BackendInfo
    server_stamp: HlcTimestamp
    max_clock_offset: _duration_pb2.Duration
    max_wait: _duration_pb2.Duration
    def __init__(self, version: _Optional[str] = ..., backend: _Optional[_Union[BackendInfo, _Mapping]] = ..., server_stamp: _Optional[_Union[HlcTimestamp, _Mapping]] = ..., max_clock_offset: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
