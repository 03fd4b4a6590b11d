"""The state of hora in this process, in one object: ``session``.

Everything the Python side keeps between ``init`` and ``shutdown`` (and
across them: an elastic worker's rounds, the exit hooks installed once)
lives here rather than in module globals, so that one place says what a
process holds; shutdown() forgets the Config and the sets
(``forget_sets``). The core's own state is the one Runtime of the bindings.
Any thread may read it; init and shutdown (the caller's thread) change it.
"""

import threading
import weakref


class Session:
    """hora's Python-side state in this process."""

    def __init__(self):
        # The Config of the running init (None: not initialized).
        self.config = None
        # Process sets this rank knows, by id (the global set is 0); the sets
        # init() and add_process_set made, by their ranks; the sets this rank
        # added without being a member (their ids are read lazily).
        self.sets_by_id = {}
        self.added_sets = {}
        self.sets_awaiting_id = weakref.WeakSet()
        # What init(comm=...) got: None, an mpi4py communicator or a list of ranks.
        self.mpi_world = None
        # Elastic training: the round this process joined last (-1: none yet),
        # and the ElasticProcessSets it declared, in order.
        self.joined_round = -1
        self.elastic_sets = []
        # Services init() starts and shutdown() stops: the /metrics server,
        # horarun --monitor's publisher.
        self.metrics_server = None
        self.monitor_publisher = None
        # Under torchrun: the Config fields hora.common.launchers found (a
        # later init joins the same job), the rendezvous server rank 0 runs
        # for the job, and torch's store, kept for the process's life.
        self.launcher_settings = None
        self.launcher_server = None
        self.torch_store = None
        # Installed at the first init, once per process.
        self.shutdown_registered = False
        self.original_excepthook = None
        # The program is ending because of an exception it did not catch:
        # the exit handler's shutdown says no goodbye (its sets break for
        # the other members instead of closing).
        self.dying_of_exception = False
        # SIGINT handling (hora.common.interrupts.SigintState).
        self.sigint = None
        # The lock, by ranks, under which a set is registered on first use
        # (process_sets.resolve), and the lock that guards the dict.
        self.first_use_locks = {}
        self.first_use_locks_guard = threading.Lock()

    def forget_sets(self, global_set):
        """After a shutdown: only ``global_set`` (id 0) is known."""
        self.sets_by_id.clear()
        self.sets_by_id[0] = global_set
        self.added_sets.clear()
        self.sets_awaiting_id = weakref.WeakSet()


session = Session()
