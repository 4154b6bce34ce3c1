"""Local console accounts: scrypt password hashes (never plain text).

Format: ``scrypt$n$r$p$<salt b64>$<hash b64>``, produced by `rewind hash-password`. New hashes use
N=2^15, r=8, p=1 (OWASP's minimum for scrypt); a hash carries its own parameters, so hashes made
with the older N=2^14 still verify.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

_N, _R, _P, _LEN = 2**15, 8, 1, 32
_MAX_N = 2**20
"""Largest cost a stored hash may ask for (1 GiB of memory at r=8); beyond that it is refused."""


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
    # OpenSSL refuses more than 32 MiB by default, which N=2^15, r=8 just passes: allow what
    # the parameters need (128 * r * (n + p + 2) bytes) plus headroom.
    maxmem = 128 * r * (n + p + 2) + 2**20
    return hashlib.scrypt(
        password.encode("utf-8", "surrogatepass"), salt=salt, n=n, r=r, p=p, dklen=dklen,
        maxmem=maxmem,
    )


def hash_password(password: str) -> str:
    """A salted scrypt hash of `password`, safe to put in secrets.toml."""
    if not isinstance(password, str) or not password:
        raise ValueError("the password must not be empty")
    salt = os.urandom(16)
    digest = _scrypt(password, salt, _N, _R, _P, _LEN)
    return "$".join([
        "scrypt", str(_N), str(_R), str(_P),
        base64.b64encode(salt).decode("ascii"), base64.b64encode(digest).decode("ascii"),
    ])


def verify_password(password: str, stored: str) -> bool:
    """True when `password` matches the `stored` hash; False for any malformed hash.

    The key derivation runs whenever the hash is well formed, also for an empty password, so
    the time taken says nothing about the password.
    """
    if not isinstance(stored, str) or not isinstance(password, str | None):
        return False
    try:
        scheme, n, r, p, salt_b64, hash_b64 = stored.split("$")
        if scheme != "scrypt" or not 1 < int(n) <= _MAX_N:
            return False
        salt = base64.b64decode(salt_b64)
        expected = base64.b64decode(hash_b64)
        digest = _scrypt(password or "", salt, int(n), int(r), int(p), len(expected))
    except (ValueError, TypeError):
        return False
    return bool(password) and hmac.compare_digest(digest, expected)


def hash_parameters(stored: str) -> tuple[int, int, int] | None:
    """(N, r, p) of a stored hash, or None when it is not a scrypt hash."""
    if not isinstance(stored, str):
        return None
    try:
        scheme, n, r, p, _, _ = stored.split("$")
        return (int(n), int(r), int(p)) if scheme == "scrypt" else None
    except ValueError:
        return None


def needs_rehash(stored: str) -> bool:
    """True when `stored` was made with a lower cost than new hashes get (print a new one with
    `rewind hash-password`)."""
    params = hash_parameters(stored)
    return params is None or params < (_N, _R, _P)
