"""``horovod.runner.common.util.timeout``: a deadline that names what timed
out."""

import time


class TimeoutException(Exception):
    """What Timeout.check_time_out_for raises once the deadline has passed."""


class Timeout:
    """A deadline ``timeout`` seconds from now. ``message`` is formatted
    with ``activity`` (``{activity}``) when it has passed."""

    def __init__(self, timeout, message):
        self._deadline = time.monotonic() + timeout
        self._message = message

    def remaining(self):
        return max(0.0, self._deadline - time.monotonic())

    def timed_out(self):
        return time.monotonic() > self._deadline

    def check_time_out_for(self, activity):
        if self.timed_out():
            raise TimeoutException(self._message.format(activity=activity))
