"""The audit keyring: a secret kept outside the database, so that evidence does not trust it (I10).

Anyone who can write the database can recompute a plain hash chain; nobody without the keyring
can make an entry's HMAC or a checkpoint's signature. A keyring holds several HMAC-SHA256
secrets by id (the current one authenticates new entries; older ones stay to verify what they
authenticated before a rotation) and one Ed25519 signing key for checkpoints.

Where a store's keyring comes from, first match wins:

1. ``$TETHER_AUDIT_KEY`` — the whole keyring, as JSON or base64 of it (``tether audit
   export-key``), for workers on several machines;
2. the file ``$TETHER_AUDIT_KEY_FILE``;
3. the store's default file: beside a SQLite database (``tether.db`` → ``tether.db.key``), or
   ``$XDG_CONFIG_HOME/tether/keys/<store id>.key`` for PostgreSQL.

A key file is created with mode 0600 and refused if its group or others may read it. Nothing
here ever makes a new key for a store that already records one: a lost key is an error that
says where it was looked for.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from tether.core.digest import canonical_json
from tether.errors import AuditKeyMissing, ConfigurationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ENV_KEYRING = "TETHER_AUDIT_KEY"
ENV_KEY_FILE = "TETHER_AUDIT_KEY_FILE"
FORMAT = "tether-audit-keyring/1"
_SECRET_BYTES = 32  # an HMAC secret; an Ed25519 private key is a 32-byte seed too


def key_id_of(secret: bytes) -> str:
    """A secret's public name: it identifies the key without revealing anything about it."""
    return hashlib.sha256(b"tether audit key id\n" + secret).hexdigest()[:16]


class AuditKeys:
    """A keyring: HMAC secrets by id (one current) and an Ed25519 signing key.

    The signing key is kept as its 32-byte seed and handed to ``cryptography`` only when a
    checkpoint is signed or checked: ``import tether`` and the gate's hot path never load it.
    """

    __slots__ = (
        "_current",
        "_pads",
        "_public",
        "_secrets",
        "_seed",
        "_signer",
        "_why_empty",
        "key_id",
        "source",
    )

    def __init__(
        self,
        hmac_secrets: Mapping[str, bytes],
        current: str,
        signing_seed: bytes | None,
        *,
        source: str = "memory",
        public_key: bytes | None = None,
    ) -> None:
        if current and current not in hmac_secrets:
            raise ConfigurationError(f"the keyring from {source} names a current key it lacks")
        if signing_seed is not None and len(signing_seed) != _SECRET_BYTES:
            raise ConfigurationError(f"the keyring from {source} has a malformed signing key")
        self._secrets = dict(hmac_secrets)
        # Each key's HMAC inner and outer states, made once: MACs and seals are on the hot
        # path, and copying a keyed state is half the cost of keying one (``hmac.digest``).
        self._pads = {kid: _pads(secret) for kid, secret in self._secrets.items()}
        self._current = self._pads.get(current)
        self._seed = signing_seed
        self._signer: Ed25519PrivateKey | None = None
        self._public = public_key
        self.key_id = current
        self.source = source  # where the ring was found, for error messages
        self._why_empty: str | None = None

    def __repr__(self) -> str:  # never the secrets
        return f"AuditKeys(key_id={self.key_id!r}, keys={len(self._secrets)}, from={self.source})"

    # -- making keyrings ---------------------------------------------------------------------
    @classmethod
    def ephemeral(cls) -> AuditKeys:
        """A random keyring that lives only in this process (the memory store's)."""
        return cls.generate(source="memory")

    @classmethod
    def generate(cls, *, source: str) -> AuditKeys:
        secret = secrets.token_bytes(_SECRET_BYTES)
        kid = key_id_of(secret)
        return cls({kid: secret}, kid, secrets.token_bytes(_SECRET_BYTES), source=source)

    @classmethod
    def empty(cls, why: str) -> AuditKeys:
        """A ring with no keys at all; ``why`` is what using it says."""
        ring = cls({}, "", None, source="no keyring")
        ring._why_empty = why
        return ring

    def missing(self, what: str) -> AuditKeyMissing:
        """The error for a ring that lacks ``what``: why it is empty, or where it came from."""
        if self._why_empty is not None:
            return AuditKeyMissing(self._why_empty)
        return AuditKeyMissing(f"the keyring from {self.source} has no {what}")

    @classmethod
    def public_only(cls, public_key: bytes, *, source: str) -> AuditKeys:
        """A ring that can only check signatures (``tether audit verify --public-key``)."""
        if len(public_key) != 32:
            raise ConfigurationError(f"the public key from {source} is not a raw Ed25519 key")
        return cls({}, "", None, source=source, public_key=public_key)

    def rotated(self) -> AuditKeys:
        """This ring with a new current HMAC key; the old ones stay to verify old entries."""
        secret = secrets.token_bytes(_SECRET_BYTES)
        kid = key_id_of(secret)
        return AuditKeys({**self._secrets, kid: secret}, kid, self._seed, source=self.source)

    # -- what the keys are for ---------------------------------------------------------------
    def has(self, key_id: str) -> bool:
        return key_id in self._secrets

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._secrets)

    def mac(self, text: str) -> tuple[str, str]:
        """``(key_id, hex HMAC-SHA256)`` of ``text`` with the current key."""
        if self._current is None:
            raise self.missing("key to authenticate with")
        return self.key_id, _hmac(self._current, text)

    def check(self, key_id: str, text: str, mac: str) -> bool:
        pads = self._pads.get(key_id)
        if pads is None:
            raise AuditKeyMissing(
                f"audit key {key_id} is not in {self.source}; restore the keyring that holds it"
            )
        return hmac.compare_digest(_hmac(pads, text), mac)

    def seal(self, purpose: str, value: Any) -> str:
        """``key_id:hexmac`` binding ``value`` to ``purpose`` (a seal for one use cannot be
        replayed as another's)."""
        key_id, mac = self.mac(_sealed_text(purpose, value))
        return f"{key_id}:{mac}"

    def verify_seal(self, purpose: str, value: Any, seal: str | None) -> bool:
        if not isinstance(seal, str):
            return False
        key_id, _, mac = seal.partition(":")
        if not mac or not self.has(key_id):
            return False
        return self.check(key_id, _sealed_text(purpose, value), mac)

    @property
    def public_key(self) -> bytes:
        """The raw Ed25519 public key (empty for a ring without one)."""
        if self._public is None:
            if self._seed is None:
                return b""
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

            raw = self._signing_key().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            self._public = raw
        return self._public

    def sign(self, message: bytes) -> bytes:
        return self._signing_key().sign(message)

    def verify_signature(self, message: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def _signing_key(self) -> Ed25519PrivateKey:
        if self._seed is None:
            raise self.missing("signing key")
        if self._signer is None:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            self._signer = Ed25519PrivateKey.from_private_bytes(self._seed)
        return self._signer

    # -- storing keyrings --------------------------------------------------------------------
    def to_json(self) -> str:
        if self._seed is None:
            raise ConfigurationError("a keyring without its signing key cannot be saved")
        return canonical_json(
            {
                "format": FORMAT,
                "current": self.key_id,
                "hmac": {k: _b64(v) for k, v in self._secrets.items()},
                "ed25519": _b64(self._seed),
            }
        )

    def export(self) -> str:
        """The keyring as one base64 line, the form ``$TETHER_AUDIT_KEY`` takes."""
        return _b64(self.to_json().encode())

    @classmethod
    def from_json(cls, text: str, *, source: str) -> AuditKeys:
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, not {FORMAT!r}")
            hmac_secrets = {str(k): _unb64(v) for k, v in data["hmac"].items()}
            seed = _unb64(data["ed25519"])
            current = str(data["current"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ConfigurationError(f"the audit keyring in {source} is unreadable: {e}") from e
        for kid, secret in hmac_secrets.items():
            if key_id_of(secret) != kid or not 16 <= len(secret) <= 64:
                raise ConfigurationError(f"the audit keyring in {source} is corrupt (key {kid})")
        return cls(hmac_secrets, current, seed, source=source)

    @classmethod
    def from_env_value(cls, value: str) -> AuditKeys:
        text = value.strip()
        if not text.startswith("{"):
            try:
                text = base64.b64decode(text, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError) as e:
                raise ConfigurationError(
                    f"${ENV_KEYRING} is neither a keyring nor base64 of one: {e}"
                ) from e
        return cls.from_json(text, source=f"${ENV_KEYRING}")


# What a store holds before its keyring is found: reading needs no key, writing does.
NO_KEYS = AuditKeys.empty("the store's audit keyring has not been found yet")


class _Pads(Protocol):
    """An HMAC-SHA256 state: ``hmac.HMAC`` or the OpenSSL object inside it."""

    def copy(self) -> _Pads: ...

    def update(self, data: bytes) -> None: ...

    def hexdigest(self) -> str: ...


def _pads(secret: bytes) -> _Pads:
    """The key's HMAC-SHA256 state before any message: each MAC copies it rather than
    deriving the key's inner and outer pads again. Where the interpreter's ``hmac`` wraps
    OpenSSL's own HMAC object (CPython's does), that object is copied directly: the pure
    Python wrapper's ``copy`` is half of each MAC's time on the gate's path, four MACs a
    call. The bytes are the same either way (tests/unit/test_keys.py compares them)."""
    made = hmac.new(secret, digestmod=hashlib.sha256)
    native = getattr(made, "_hmac", None)
    if native is not None and all(hasattr(native, m) for m in ("copy", "update", "hexdigest")):
        return cast(_Pads, native)
    return made


def _hmac(pads: _Pads, text: str) -> str:
    h = pads.copy()
    h.update(text.encode())
    return h.hexdigest()


def _sealed_text(purpose: str, value: Any) -> str:
    return purpose + "\n" + canonical_json(value)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise TypeError("a key must be a base64 string")
    return base64.b64decode(text, validate=True)


# -- finding a store's keyring ---------------------------------------------------------------
def config_key_path(store_id: str) -> Path:
    """``$XDG_CONFIG_HOME/tether/keys/<store id>.key`` (XDG's default: ``~/.config``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tether" / "keys" / f"{store_id}.key"


def key_file(default: Path | None) -> Path | None:
    """The file a store's keyring lives in: ``$TETHER_AUDIT_KEY_FILE`` or the store's default."""
    named = os.environ.get(ENV_KEY_FILE)
    return Path(named) if named else default


def where(default: Path | None) -> str:
    """Where a keyring is looked for, as an error message names it."""
    path = key_file(default)
    return f"${ENV_KEYRING}" if path is None else f"{path} or ${ENV_KEYRING}"


def find_keys(default: Path | None) -> AuditKeys | None:
    """The keyring from the environment or the key file, or None if there is none yet."""
    value = os.environ.get(ENV_KEYRING)
    if value:
        return AuditKeys.from_env_value(value)
    path = key_file(default)
    if path is None or not path.exists():
        return None
    return load_key_file(path)


def load_key_file(path: Path) -> AuditKeys:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigurationError(
                f"audit key file {path} is accessible to other users (mode "
                f"{stat.S_IMODE(mode):04o}); run chmod 600 {path}"
            )
        text = path.read_text()
    except OSError as e:
        raise ConfigurationError(f"cannot read audit key file {path}: {e.strerror}") from e
    return AuditKeys.from_json(text, source=str(path))


def create_key_file(path: Path) -> AuditKeys:
    """A new keyring in a new 0600 file. If another process made it first, use theirs.

    The ring is written whole to a private temporary file and then hard-linked into place,
    which fails if the name exists: another opener never reads a half-written key file, and
    two openers racing never both believe they made the store's key."""
    keys = AuditKeys.generate(source=str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _temporary(path, keys) as tmp:
            os.link(tmp, path)
    except FileExistsError:
        return load_key_file(path)
    except OSError as e:
        raise ConfigurationError(f"cannot create audit key file {path}: {e.strerror}") from e
    return keys


def save_key_file(path: Path, keys: AuditKeys) -> None:
    """Replace the keyring in ``path`` atomically: a crash leaves the old ring or the new."""
    try:
        with _temporary(path, keys) as tmp:
            tmp.replace(path)
    except OSError as e:
        raise ConfigurationError(f"cannot write audit key file {path}: {e.strerror}") from e


@contextlib.contextmanager
def _temporary(path: Path, keys: AuditKeys) -> Iterator[Path]:
    """``keys`` written and synced to a new file beside ``path``, removed afterwards."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    _write_new(tmp, keys.to_json())
    try:
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _write_new(path: Path, text: str) -> None:
    # O_EXCL: never write through a file (or link) someone else put there; 0600 from birth.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
