"""HORA_METRICS_PORT=P: each rank serves the counters of the process sets it
belongs to (hvd.metrics()) at http://<host>:(P + local_rank)/metrics, in
Prometheus' text exposition format (docs/observability.md). It listens on
HORA_METRICS_ADDR, by default the loopback address only.

The format is written here directly, with the standard library's
http.server, rather than with prometheus-client: it is a few dozen lines,
and every rank's environment stays free of one more package. Each
connection gets a daemon thread of its own and REQUEST_SECONDS to send its
request, so neither a slow scraper nor an idle connection holds up the
others or hvd.shutdown(); a scrape reads the counters under the runtime's
lock and never waits for an op.
"""

import http.server
import socket
import sys
import threading

from hora import _core
from hora.common import telemetry
from hora.common.config import DEFAULT_METRICS_ADDRESS as DEFAULT_ADDRESS
from hora.common.config import LAST_PORT
from hora.common.config import METRICS_ADDRESS_VARIABLE as ADDRESS_VARIABLE
from hora.common.config import METRICS_PORT_VARIABLE as PORT_VARIABLE
from hora.common.session import session

# How long a connection may take to send its request, and how long
# stop() waits for the serving thread.
REQUEST_SECONDS = 5.0
STOP_SECONDS = 1.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (metric, type, help, key in the metrics dict). Families by op kind and
# by member are written apart (_BY_KEY_FAMILIES).
_SCALAR_FAMILIES = (
    ("hora_negotiation_seconds_total", "counter",
     "Seconds from each op's submission on this rank to its start, summed.", "negotiation_seconds"),
    ("hora_transport_seconds_total", "counter",
     "Seconds spent moving and reducing the data of ops, summed.", "transport_seconds"),
    ("hora_wait_for_slowest_seconds_total", "counter",
     "Coordinator only: seconds from the first to the last member's submission of each op, summed.",
     "wait_for_slowest_seconds"),
    ("hora_cache_lookups_total", "counter", "Submissions of cacheable ops.", "cache_lookups"),
    ("hora_cache_hits_total", "counter", "Submissions agreed through the response cache.", "cache_hits"),
    ("hora_fast_path_hits_total", "counter",
     "Cache hits agreed without the coordinator's round trip (the fast lane, the agreement between hosts).",
     "fast_path_hits"),
    ("hora_responses_total", "counter", "Ops run (a fused allreduce counts once).", "responses"),
    ("hora_tensors_total", "counter", "This rank's tensors in the ops run.", "tensors"),
    ("hora_errors_total", "counter", "Ops that failed with a mismatch.", "errors"),
    ("hora_stalls_total", "counter", "Coordinator only: stall warnings.", "stalls"),
    ("hora_set_broken", "gauge", "1 once the process set is broken (a member died, timed out or left).", "broken"),
)
_BY_KEY_FAMILIES = (
    ("hora_ops_total", "Ops completed on this rank, by kind.", "ops", "kind"),
    ("hora_bytes_total", "Payload bytes of the completed ops on this rank, by kind.", "bytes", "kind"),
    ("hora_slowest_member_total", "Coordinator only: ops whose last submission came from this member "
     "(global rank).", "slowest_member", "member"),
)


def ranks_label(ranks):
    """A set's ranks as a label value: "0,1", "0,2,4"; runs of three or
    more consecutive ranks as "0-63"."""
    parts, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            run = ranks[start:i]
            parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
            start = i
    return ",".join(parts)


def _escaped(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs):
    return "{" + ",".join(f'{name}="{_escaped(value)}"' for name, value in pairs) + "}"


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(int(value))


def exposition(metrics_by_set, rank):
    """The text format of ``metrics_by_set`` ({set id: hvd.metrics dict}) as
    rank ``rank`` serves it."""
    sets = [([("process_set", set_id), ("ranks", ranks_label(found["ranks"])), ("rank", rank)], found)
            for set_id, found in sorted(metrics_by_set.items())]
    lines = []
    for metric, help_text, key, label in _BY_KEY_FAMILIES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
        for labels, found in sets:
            for name, value in sorted(found[key].items()):
                lines.append(f"{metric}{_labels(labels + [(label, name)])} {_number(value)}")
    for metric, kind, help_text, key in _SCALAR_FAMILIES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
        lines += [f"{metric}{_labels(labels)} {_number(found[key])}" for labels, found in sets]
    return "\n".join(lines) + "\n"


def _current_exposition():
    by_set = {}
    for set_id in _core.process_set_ids():
        try:
            _, ranks, _ = _core.process_set(set_id)
            if _core.rank() in ranks:
                by_set[set_id] = telemetry.metrics(set_id)
        except ValueError:
            continue  # removed since the ids were listed
    return exposition(by_set, _core.rank())


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    timeout = REQUEST_SECONDS   # the socket's timeout: a silent client is dropped

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.split("?")[0] != "/metrics":
            self._reply(404, "text/plain; charset=utf-8", "hora serves its metrics at /metrics\n")
            return
        try:
            body = _current_exposition()
        except Exception as error:  # the runtime is stopping: say so, keep serving
            self._reply(503, "text/plain; charset=utf-8", f"hora metrics unavailable: {error}\n")
            return
        self._reply(200, CONTENT_TYPE, body)

    def _reply(self, status, content_type, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (http.server's name)
        pass  # one line per scrape on every rank's stderr would drown the job's output


class _ThreadingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True       # a connection in progress never keeps the rank alive
    block_on_close = False      # and server_close() does not wait for it


class MetricsServer:
    """The HTTP server of one rank. Started by hvd.init(), stopped by
    hvd.shutdown() before the runtime stops. Accepts on its own daemon
    thread and answers each connection on a daemon thread of its own;
    stop() returns within about STOP_SECONDS whatever the clients do."""

    def __init__(self, port, address=DEFAULT_ADDRESS):
        self.port = port
        self._server = _ThreadingServer((address, port), _MetricsHandler)
        self.address = self._server.server_address[0]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": None},
                                        name="hora-metrics-http", daemon=True)
        self._thread.start()

    def stop(self):
        # serve_forever blocks in select without a timeout: shutting the
        # listening socket down wakes it to see the shutdown request.
        try:
            self._server.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        stopping = threading.Thread(target=self._server.shutdown, daemon=True, name="hora-metrics-stop")
        stopping.start()
        stopping.join(STOP_SECONDS)
        self._server.server_close()
        self._thread.join(STOP_SECONDS)


def _warn(text):
    sys.stderr.write(f"hora: WARNING: {text}\n")
    sys.stderr.flush()


def start(base_port, local_rank, address=DEFAULT_ADDRESS):
    """Serves this rank's metrics on ``address``, port ``base_port +
    local_rank``; a port that is out of range or taken, or an address this
    host cannot listen on, gives a warning, not an error: the job runs on
    without this rank's endpoint."""
    stop()
    if base_port is None:
        return
    port = base_port + local_rank
    if port > LAST_PORT:
        _warn(f"{PORT_VARIABLE}={base_port}: local rank {local_rank} would serve its metrics on port {port}, "
              f"past {LAST_PORT}; this rank serves none")
        return
    try:
        session.metrics_server = MetricsServer(port, address)
    except OSError as error:
        where = f"port {port}" if address == DEFAULT_ADDRESS else f"{ADDRESS_VARIABLE}={address} port {port}"
        _warn(f"{PORT_VARIABLE}={base_port}: cannot serve this rank's metrics on {where} "
              f"({error.strerror or error}); the job runs on without them")


def stop():
    """Stops the server if one runs. Idempotent."""
    server, session.metrics_server = session.metrics_server, None
    if server is not None:
        server.stop()


def serving_port():
    """The port this rank serves its metrics on, or None."""
    server = session.metrics_server
    return server.port if server is not None else None


def serving_address():
    """The address this rank listens on for its metrics, or None."""
    server = session.metrics_server
    return server.address if server is not None else None
