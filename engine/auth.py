"""Local console accounts: scrypt password hashes (never plain text).

Format: ``scrypt$n$r$p$<salt b64>$<hash b64>``, produced by `rewind hash-password`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

_N, _R, _P, _LEN = 2**14, 8, 1, 32


def hash_password(password: str) -> str:
    """A salted scrypt hash of `password`, safe to put in secrets.toml."""
    if not isinstance(password, str) or not password:
        raise ValueError("the password must not be empty")
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P, dklen=_LEN)
    return "$".join([
        "scrypt", str(_N), str(_R), str(_P),
        base64.b64encode(salt).decode("ascii"), base64.b64encode(digest).decode("ascii"),
    ])


def verify_password(password: str, stored: str) -> bool:
    """True when `password` matches the `stored` hash; False for any malformed hash."""
    try:
        scheme, n, r, p, salt_b64, hash_b64 = stored.split("$")
        if scheme != "scrypt":
            return False
        salt = base64.b64decode(salt_b64)
        expected = base64.b64decode(hash_b64)
        digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=int(n), r=int(r),
                                p=int(p), dklen=len(expected))
    except (ValueError, TypeError, AttributeError):
        return False
    return hmac.compare_digest(digest, expected)
