"""Who is at the other end of a request: sessions, CSRF tokens, the sign-in limiter, and the
trusted reverse-proxy header.

Sessions live in the server's memory, keyed by a random id the browser holds in an HttpOnly,
SameSite=Strict cookie: nothing in the cookie means anything without the server, a restart
signs everyone out, and the credential itself is never kept (only its id, so a revoked
credential ends its sessions at the next request). Signing in always issues a new session id
(no fixation), an id older than ``rotate_s`` is replaced as it is used, and a session ends
after ``idle_s`` without use or ``ttl_s`` in all. A replaced id keeps answering for
``grace_s`` (as the new session), so requests already in flight when it was replaced, and a
form posted from a page loaded before, still succeed.

Only signing in makes a session. A visitor who is not signed in holds a separate cookie with
a random nonce, and the sign-in form's CSRF token is an HMAC of that nonce under a key of
this process (``Sessions.visitor``): nothing is stored for them, so a flood of cookie-less
requests cannot evict anything, and a cross-site link (which arrives without the Strict
session cookie) never overwrites the session the browser already holds.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tether.core.principal import Identity
from tether.identity import identity_of

if TYPE_CHECKING:
    from tether.store import Store

COOKIE = "tether_session"
VISITOR_COOKIE = "tether_visitor"


@dataclass(frozen=True)
class Session:
    sid: str  # "" for a visitor who is not signed in (nothing is stored for them)
    csrf: str
    started_at: float  # when the session began: it ends ``ttl_s`` later, rotated or not
    issued_at: float  # when this id was issued: it is replaced ``rotate_s`` later
    last_seen: float
    credential_id: str | None = None  # None: not signed in
    nonce: str = ""  # a visitor's: what their CSRF token is the HMAC of
    fresh: bool = False  # a visitor's nonce made for this request: the response sets it

    @property
    def signed_in(self) -> bool:
        return self.credential_id is not None


@dataclass
class Sessions:
    """Server-side sessions. Thread-safe: pages run in a thread pool."""

    ttl_s: float = 8 * 3600.0
    idle_s: float = 1800.0
    rotate_s: float = 900.0
    grace_s: float = 60.0
    max_sessions: int = 10_000
    clock: Callable[[], float] = time.time
    _by_id: dict[str, Session] = field(default_factory=dict)
    # A replaced id -> (the id that replaced it, until when it still answers).
    _retired: dict[str, tuple[str, float]] = field(default_factory=dict)
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _new(
        self, credential_id: str, csrf: str | None = None, started: float | None = None
    ) -> Session:
        now = self.clock()
        session = Session(
            sid=secrets.token_urlsafe(32),
            csrf=csrf or secrets.token_urlsafe(32),
            started_at=now if started is None else started,
            issued_at=now,
            last_seen=now,
            credential_id=credential_id,
        )
        if len(self._by_id) >= self.max_sessions:
            self._prune(now)
        self._by_id[session.sid] = session
        return session

    def _prune(self, now: float) -> None:
        for sid, s in list(self._by_id.items()):
            if not self._alive(s, now):
                del self._by_id[sid]
        for old, (_, until) in list(self._retired.items()):
            if now > until:
                del self._retired[old]
        # Still full: only sign-ins fill it (visitors store nothing); the least recently
        # used one goes.
        while len(self._by_id) >= self.max_sessions:
            victim = min(self._by_id.values(), key=lambda s: s.last_seen)
            del self._by_id[victim.sid]

    def _alive(self, s: Session, now: float) -> bool:
        return now - s.started_at <= self.ttl_s and now - s.last_seen <= self.idle_s

    def _find(self, sid: str | None, now: float) -> Session | None:
        """The live session ``sid`` names, following a replaced id within its grace."""
        if not sid:
            return None
        found = self._by_id.get(sid)
        if found is None:
            retired = self._retired.get(sid)
            if retired is None:
                return None
            if now > retired[1]:
                del self._retired[sid]
                return None
            found = self._by_id.get(retired[0])
            if found is None:
                return None
        if not self._alive(found, now):
            self._by_id.pop(found.sid, None)
            return None
        return found

    def ends_at(self, session: Session) -> float:
        """When ``session`` ends unless it is used again (or at all, past ``ttl_s``)."""
        return min(session.started_at + self.ttl_s, session.last_seen + self.idle_s)

    def peek(self, sid: str | None) -> Session | None:
        """The live session ``sid`` names, untouched and not rotated."""
        with self._lock:
            return self._find(sid, self.clock())

    def touch(self, sid: str | None) -> Session | None:
        """The heartbeat of an open live page: the session ``sid`` names is kept from its
        idle end (never past ``ttl_s``), without a new id (a stream cannot set a cookie)."""
        now = self.clock()
        with self._lock:
            found = self._find(sid, now)
            if found is None:
                return None
            touched = replace(found, last_seen=now)
            self._by_id[found.sid] = touched
            return touched

    def current(self, sid: str | None) -> Session | None:
        """The live session ``sid`` names (rotated if it is due: the response must then set
        the new id), or None."""
        now = self.clock()
        with self._lock:
            found = self._find(sid, now)
            if found is None:
                return None
            if now - found.issued_at > self.rotate_s:
                del self._by_id[found.sid]
                # Rotation renews the id, not the session's life: it still ends at ttl_s.
                new = self._new(found.credential_id or "", found.csrf, found.started_at)
                self._retired[found.sid] = (new.sid, now + self.grace_s)
                for old, (to, until) in list(self._retired.items()):
                    if to == found.sid:  # an id retired before: it follows to the newest
                        self._retired[old] = (new.sid, until)
                return new
            touched = replace(found, last_seen=now)
            self._by_id[found.sid] = touched
            return touched

    def visitor(self, nonce: str | None) -> Session:
        """A visitor who is not signed in: their CSRF token is the HMAC of the nonce their
        cookie holds (a new nonce if it holds none that could be one). Nothing is stored."""
        fresh = not (nonce and 20 <= len(nonce) <= 64 and nonce.isascii() and nonce.isalnum())
        if fresh:
            nonce = secrets.token_hex(16)
        assert nonce is not None
        mac = hmac.new(self._key, b"visitor-csrf:" + nonce.encode(), hashlib.sha256)
        now = self.clock()
        return Session(
            sid="",
            csrf=mac.hexdigest(),
            started_at=now,
            issued_at=now,
            last_seen=now,
            nonce=nonce,
            fresh=fresh,
        )

    def sign_in(self, credential_id: str) -> Session:
        """A new session (new id, new CSRF token) for the credential."""
        with self._lock:
            return self._new(credential_id)

    def end(self, session: Session) -> None:
        with self._lock:
            self._by_id.pop(session.sid, None)
            for old, (to, _) in list(self._retired.items()):
                if session.sid in (to, old):
                    del self._retired[old]


def csrf_ok(session: Session, presented: str | None) -> bool:
    # As bytes: compare_digest raises on a str holding non-ASCII, and the form is anyone's.
    return bool(presented) and hmac.compare_digest(
        session.csrf.encode(), str(presented).encode("utf-8", "surrogatepass")
    )


def identity_for(store: Store, credential_id: str, via: str) -> Identity | None:
    """The approver a live credential names, as of now (revoked: None)."""
    with store.read() as tx:
        record = tx.get_credential(credential_id)
    if record is None or record.revoked_at is not None or record.kind != "approver":
        return None
    return identity_of(record, via=via)


def identity_by_name(store: Store, name: str, via: str) -> Identity | None:
    """The approver registered as ``name`` (their newest live credential), for a header set
    by a trusted proxy: the proxy vouches for the person, the registration for what they
    may approve."""
    live = [
        r
        for r in store.list_credentials()
        if r.name == name and r.kind == "approver" and r.revoked_at is None
    ]
    if not live:
        return None
    return identity_of(max(live, key=lambda r: r.created_at), via=via)


@dataclass(frozen=True)
class ProxyAuth:
    """The reverse proxies in front of the inbox: from these addresses (and only these) the
    ``X-Forwarded-For`` header says who the client is, and ``header`` (if set) names the
    signed-in approver.

    Only the direct peer's address is trusted to be a proxy: ``tether serve`` turns off
    uvicorn's own forwarded-header handling, which would otherwise let any local process
    claim to be a proxy's client (or a proxy) by sending ``X-Forwarded-For``."""

    header: str | None
    trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def parse(cls, header: str | None, addresses: Iterable[str]) -> ProxyAuth:
        from tether.errors import ConfigurationError

        nets = []
        for a in addresses:
            try:
                nets.append(ipaddress.ip_network(a.strip(), strict=False))
            except ValueError:
                raise ConfigurationError(
                    f"--trusted-proxy {a!r} is not an IP address or network (e.g. 10.0.0.5 "
                    "or 10.0.0.0/24)"
                ) from None
        if not nets:
            raise ConfigurationError(
                "--proxy-header needs at least one --trusted-proxy address: a header anyone "
                "can send proves nothing"
            )
        name = header.strip().lower() if header and header.strip() else None
        return cls(header=name, trusted=tuple(nets))

    def trusts(self, client: str | None) -> bool:
        if not client:
            return False
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(address in net for net in self.trusted)

    def client_address(self, peer: str | None, forwarded_for: str | None) -> str | None:
        """Who the client is: ``peer``, unless it is a trusted proxy, in which case the
        nearest address in ``X-Forwarded-For`` that is not itself a trusted proxy (the
        entries further left were written by the client and prove nothing)."""
        if not self.trusts(peer) or not forwarded_for:
            return peer
        for hop in reversed([h.strip() for h in forwarded_for.split(",")]):
            if self.trusts(hop):
                continue
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # garbled: count it against the proxy rather than believe it
        return peer


def limiter_key(address: str) -> str:
    """What failed sign-ins are counted against: the address, or an IPv6 address's /64 (one
    client usually holds a whole /64 and could otherwise take a fresh address per guess)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def credential_key(token: str) -> str | None:
    """What failures naming one credential are counted against: its id (the public part of
    a token), so guesses at one credential from many addresses are slowed too."""
    from tether.core.principal import TOKEN_PATTERN

    match = TOKEN_PATTERN.fullmatch(token.strip())
    return f"credential:{match.group(1)}" if match else None


@dataclass
class Limiter:
    """At most ``limit`` failed sign-ins per key in ``window_s``; the keys are the client's
    address and the credential a refused token names. Only refused credentials are
    counted and only they are slowed: a credential that is right is accepted whatever
    others sent from the same address (a shared NAT, a proxy), because a guess at a
    256-bit secret cannot be right, so refusing a right one would protect nothing."""

    limit: int = 5
    window_s: float = 60.0
    clock: Callable[[], float] = time.time
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failures.setdefault(client, deque())
        while times and now - times[0] > self.window_s:
            times.popleft()
        return times

    def retry_after(self, client: str) -> float | None:
        """Seconds until ``client`` may try again, or None if it may now."""
        now = self.clock()
        with self._lock:
            times = self._recent(client, now)
            if len(times) < self.limit:
                return None
            return max(1.0, self.window_s - (now - times[0]))

    def locked(self, keys: Iterable[str | None]) -> float | None:
        """The longest wait any of ``keys`` is under, or None."""
        waits = [w for k in keys if k is not None and (w := self.retry_after(k)) is not None]
        return max(waits) if waits else None

    def failed(self, client: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) > 10_000:  # forget quiet addresses rather than grow forever
                for c in [c for c, t in self._failures.items() if not self._recent(c, now)]:
                    del self._failures[c]
            self._recent(client, now).append(now)
