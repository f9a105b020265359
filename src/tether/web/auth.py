"""Who is at the other end of a request: sessions, CSRF tokens, the sign-in limiter, and the
trusted reverse-proxy header.

Sessions live in the server's memory, keyed by a random id the browser holds in an HttpOnly,
SameSite=Strict cookie: nothing in the cookie means anything without the server, a restart
signs everyone out, and the credential itself is never kept (only its id, so a revoked
credential ends its sessions at the next request). Signing in always issues a new session id
(no fixation), an id older than ``rotate_s`` is replaced as it is used, and a session ends
after ``idle_s`` without use or ``ttl_s`` in all.

Every visitor gets a session, signed in or not, because every form (signing in too) carries
the session's CSRF token, and a POST without the right one is refused.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Session:
    sid: str
    csrf: str
    started_at: float  # when the session began: it ends ``ttl_s`` later, rotated or not
    issued_at: float  # when this id was issued: it is replaced ``rotate_s`` later
    last_seen: float
    credential_id: str | None = None  # None: not signed in


@dataclass
class Sessions:
    """Server-side sessions. Thread-safe: pages run in a thread pool."""

    ttl_s: float = 8 * 3600.0
    idle_s: float = 1800.0
    rotate_s: float = 900.0
    max_sessions: int = 10_000
    clock: Callable[[], float] = time.time
    _by_id: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _new(
        self, credential_id: str | None, csrf: str | None = None, started: float | None = None
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
        # Still full (a flood of anonymous visitors): drop the oldest anonymous ones.
        while len(self._by_id) >= self.max_sessions:
            anonymous = [s for s in self._by_id.values() if s.credential_id is None]
            victim = min(anonymous or self._by_id.values(), key=lambda s: s.last_seen)
            del self._by_id[victim.sid]

    def _alive(self, s: Session, now: float) -> bool:
        return now - s.started_at <= self.ttl_s and now - s.last_seen <= self.idle_s

    def peek(self, sid: str | None) -> Session | None:
        """The live session ``sid`` names, untouched: for a long-lived stream, which must
        end with its session but neither keeps it alive nor rotates its id."""
        with self._lock:
            found = self._by_id.get(sid) if sid else None
            return found if found is not None and self._alive(found, self.clock()) else None

    def current(self, sid: str | None) -> Session:
        """The live session ``sid`` names (rotated if it is due: the response must then set
        the new id), or a new anonymous one."""
        now = self.clock()
        with self._lock:
            found = self._by_id.get(sid) if sid else None
            if found is None or not self._alive(found, now):
                if found is not None:
                    del self._by_id[found.sid]
                return self._new(None)
            if found.credential_id is not None and now - found.issued_at > self.rotate_s:
                del self._by_id[found.sid]
                # Rotation renews the id, not the session's life: it still ends at ttl_s.
                return self._new(found.credential_id, found.csrf, found.started_at)
            touched = replace(found, last_seen=now)
            self._by_id[found.sid] = touched
            return touched

    def sign_in(self, old: Session, credential_id: str) -> Session:
        """A new session (new id, new CSRF token) for the credential; the old one ends."""
        with self._lock:
            self._by_id.pop(old.sid, None)
            return self._new(credential_id)

    def end(self, session: Session) -> Session:
        with self._lock:
            self._by_id.pop(session.sid, None)
            return self._new(None)


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


@dataclass
class Limiter:
    """At most ``limit`` failed sign-ins per client address in ``window_s``."""

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

    def failed(self, client: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) > 10_000:  # forget quiet addresses rather than grow forever
                for c in [c for c, t in self._failures.items() if not self._recent(c, now)]:
                    del self._failures[c]
            self._recent(client, now).append(now)
