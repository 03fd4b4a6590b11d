"""``horovod.runner.common.util``: ``env`` (the rank and size a launcher
gave this process), ``secret`` (keys and HMAC digests) and ``timeout``."""
