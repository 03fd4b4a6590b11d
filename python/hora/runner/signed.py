"""Pickles that travel through a job's store signed with the job's secret.

Whoever holds the store's secret can write any key, and unpickling runs
code: so what a driver unpickles (a rank's result) and what a rank
unpickles (the driver's function) is stored as the pickle followed by
HMAC-SHA-256(secret, b"hora-result" + length of the store key (u32, little
endian) + the store key + the pickle), and checked before it is unpickled.
The key is in the signature, so a signed value moved to another key (one
rank's result under another rank's name) is refused too.
"""

import hashlib
import hmac
import struct

TAG_BYTES = hashlib.sha256().digest_size
_CONTEXT = b"hora-result"


class UnsignedValueError(ValueError):
    """A value whose signature is missing or wrong."""


def _bytes(data):
    return data.encode() if isinstance(data, str) else bytes(data)


def _tag(secret, store_key, payload):
    store_key = _bytes(store_key)
    message = _CONTEXT + struct.pack("<I", len(store_key)) + store_key + payload
    return hmac.new(_bytes(secret), message, hashlib.sha256).digest()


def sign(secret, store_key, payload):
    """`payload` (bytes) with its signature for `store_key`, to store there."""
    return payload + _tag(secret, store_key, payload)


def verify(secret, store_key, stored):
    """The payload of `stored`, read from `store_key`; UnsignedValueError
    unless it carries the signature `secret` gives it."""
    stored = bytes(stored)
    payload, tag = stored[:-TAG_BYTES], stored[-TAG_BYTES:]
    if len(stored) < TAG_BYTES or not hmac.compare_digest(tag, _tag(secret, store_key, payload)):
        raise UnsignedValueError("is not signed with the job's secret; refusing to unpickle it")
    return payload
