"""``horovod.runner.common.util.secret``: random keys and the HMAC-SHA-256
digests made and checked with them."""

import hashlib
import hmac
import secrets

SECRET_LENGTH = 32  # bytes
DIGEST_LENGTH = 32  # bytes
HOROVOD_SECRET_KEY = "_HOROVOD_SECRET_KEY"


def make_secret_key():
    """A fresh random key of SECRET_LENGTH bytes."""
    return secrets.token_bytes(SECRET_LENGTH)


def compute_digest(key, message):
    """HMAC-SHA-256 of ``message`` (bytes) under ``key``."""
    return hmac.new(key, message, hashlib.sha256).digest()


def check_digest(key, message, digest):
    """Whether ``digest`` is that of ``message`` under ``key`` (constant time)."""
    return hmac.compare_digest(compute_digest(key, message), digest)
