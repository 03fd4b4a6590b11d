"""This rank's side of ``horarun --monitor``: publishes its per-set counters
to the job's store (hora/runner/monitor.py reads and combines them).

horarun --monitor gives every rank HORA_MONITOR_INTERVAL; init() then
starts a MetricsPublisher, and shutdown() stops it after one last report.
The store is the one the core reaches, at the address, port and secret
horarun gives every rank (HORA_RENDEZVOUS_ADDR / HOROVOD_GLOO_RENDEZVOUS_ADDR,
HORA_RENDEZVOUS_PORT / HOROVOD_GLOO_RENDEZVOUS_PORT, HORA_SECRET), as
init()'s Config holds them. Without them nothing starts; a store that
cannot be reached, or goes away, ends the publishing with one warning: the
monitor observes the job and never fails it.
"""

import json
import sys
import threading
import time

from hora.common import telemetry
from hora.common.session import session
from hora.runner import monitor as job_monitor
from hora.runner.rendezvous import RendezvousClient, RendezvousError

CONNECT_TIMEOUT_SECONDS = 5.0


def _warn(message):
    print(f"hora: WARNING: horarun --monitor: {message}", file=sys.stderr, flush=True)


class MetricsPublisher:
    """Writes this rank's counters (hvd.metrics() of every set it belongs
    to) as JSON to `client`'s store under hora.metrics.<rank>, every
    `interval` seconds on a daemon thread. start() is called by init();
    stop() by shutdown(), before the core stops: it ends the thread and
    makes the last report on the caller's thread. Owns `client`."""

    def __init__(self, client, rank, interval):
        self._client = client
        self._rank = rank
        self._interval = interval
        self._since = time.monotonic()
        self._stopped = threading.Event()
        self._store_failed = False
        self._removed = {}   # set id -> its counters when this rank removed it
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="hora-monitor", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stopped.set()
        self._thread.join(timeout=CONNECT_TIMEOUT_SECONDS)
        if not self._thread.is_alive():
            self.publish(final=True)
        self._client.close()

    def keep_removed(self, set_id):
        """Called before this rank removes set `set_id`: its last counters
        stay in every later report, marked removed, so that the summary
        lists a set removed before any report caught it."""
        try:
            counters = telemetry.metrics(set_id)
        except (ValueError, RuntimeError):
            return
        counters["removed"] = True
        with self._lock:
            self._removed[set_id] = counters

    def _run(self):
        while not self._stopped.wait(self._interval) and not self._store_failed:
            self.publish()

    def publish(self, final=False):
        """Writes one report; a failure to read the counters skips it, one
        to reach the store ends the publishing."""
        if self._store_failed:
            return
        try:
            live = telemetry.metrics()
        except (ValueError, RuntimeError):
            return   # a set went away while it was read; the next report has it right
        with self._lock:
            sets = {**self._removed, **live}
        report = {"rank": self._rank, "at": time.monotonic(), "since": self._since, "final": final,
                  "sets": sets}
        try:
            self._client.set(job_monitor.metrics_key(self._rank), json.dumps(report))
        except (OSError, ValueError, RendezvousError) as error:
            self._store_failed = True
            if not final:
                _warn(f"rank {self._rank} stops publishing its counters: {error}")


def start(rank, config):
    """Starts publishing for rank `rank` if horarun asked for it (in
    `config`, init()'s Config)."""
    text = config.monitor_interval
    if not text or session.monitor_publisher is not None:
        return
    try:
        interval = float(text)
    except ValueError:
        interval = 0.0
    if not 0 < interval < float("inf"):
        _warn(f"{job_monitor.INTERVAL_VARIABLE}={text!r} is not a positive number of seconds; not publishing")
        return
    if config.store_address() is None:
        return
    address, port, secret = config.store_address()
    try:
        client = RendezvousClient(address, port, secret, connect_timeout=CONNECT_TIMEOUT_SECONDS)
    except (OSError, ValueError, RendezvousError) as error:
        _warn(f"rank {rank} cannot reach the job's store to publish its counters: {error}")
        return
    session.monitor_publisher = MetricsPublisher(client, rank, interval).start()


def stop():
    """Makes the last report and stops publishing (nothing if not started)."""
    publisher, session.monitor_publisher = session.monitor_publisher, None
    if publisher is not None:
        publisher.stop()
