"""Ctrl-C in a rank: it ends with one line, also while it waits in a
collective, and never with 'Error in sys.excepthook'.

Python runs a signal handler only on the main thread, between bytecodes.
A rank whose main thread waits in hora's core (a collective whose peers
never come) would not see SIGINT until the op times out; and a SIGINT that
arrives while an error from the core unwinds fires on the first bytecode
Python runs next, which is the excepthook itself, hence the noise. So,
after init(), while SIGINT still has Python's default handler:

- hora's handler raises KeyboardInterrupt as the default one does, except
  while the rank reports an uncaught exception or shuts hora down: then it
  only records the interrupt, and the report becomes the one line;
- a watcher thread learns of each SIGINT at once (signal.set_wakeup_fd,
  only when nothing else uses it); if the main thread has not taken the
  interrupt after WAIT_SECONDS and is blocked in a call into hora, the
  watcher prints the one line and ends the process (status 130: the ops
  it waits for cannot be cancelled from Python).

The line names the rank and the program's own line that was running (not
one inside hora, an installed library or the standard library):
``KeyboardInterrupt: rank 0 stopped at train.py:42 (in train_step)``. A
rank that ends because of an uncaught exception also stops nanobind's
report of objects still alive at exit (a daemon thread may hold a handle):
that report is meant for bugs in bindings, and here it is only noise.
"""

import os
import signal
import socket
import sys
import sysconfig
import threading
import time

from hora.common.session import session

WAIT_SECONDS = 0.5
_HORA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where installed libraries live (the standard library, site-packages): a
# frame there is not the program's own line.
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(path) + os.sep
                              for name in ("stdlib", "platstdlib", "purelib", "platlib")
                              if (path := sysconfig.get_paths().get(name))}))


class SigintState:
    """What the handler and the watcher know of this process's SIGINTs
    (session.sigint holds the one of the process)."""

    def __init__(self):
        self.rank = None
        self.installed = False
        self.seen = 0                   # SIGINTs the watcher saw arrive
        self.taken = 0                  # SIGINTs the main thread's handler ran for
        self.taken_while_reporting = False
        self.quiet_codes = set()        # code objects during which SIGINT is only recorded


_state = session.sigint = SigintState()


def install(rank):
    """Takes over SIGINT for rank `rank` (from the main thread, after init);
    does nothing where the program chose its own SIGINT handler."""
    _state.rank = rank
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    signal.signal(signal.SIGINT, _on_sigint)
    _state.installed = True
    # Python joins the program's threads there when the main thread ended:
    # the process is exiting already.
    exiting = getattr(threading, "_shutdown", None)
    if exiting is not None and hasattr(exiting, "__code__"):
        _state.quiet_codes.add(exiting.__code__)
    _start_watcher()


def quiet_during(function):
    """While `function` runs, a SIGINT is recorded instead of raised."""
    _state.quiet_codes.add(function.__code__)
    return function


def _on_sigint(signum, frame):
    _state.taken += 1
    probe = frame
    while probe is not None:
        if probe.f_code in _state.quiet_codes:
            _state.taken_while_reporting = True
            return
        probe = probe.f_back
    raise KeyboardInterrupt


def _start_watcher():
    receiver, sender = socket.socketpair()
    sender.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(sender.fileno(), warn_on_full_buffer=False)
    except ValueError:
        previous = None
    if previous != -1:   # the program (asyncio, ...) uses the wakeup fd: leave it theirs
        if previous is not None:
            signal.set_wakeup_fd(previous)
        receiver.close()
        sender.close()
        return
    os.register_at_fork(after_in_child=_forget_wakeup_fd)
    threading.Thread(target=_watch, args=(receiver, sender), daemon=True, name="hora-interrupts").start()


def _forget_wakeup_fd():
    # A forked child has no watcher; its signals must not wake ours.
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass


def _watch(receiver, sender):
    while True:
        try:
            data = receiver.recv(64)
        except OSError:
            return
        if not data:
            return
        arrived = data.count(signal.SIGINT)
        if arrived and signal.getsignal(signal.SIGINT) is _on_sigint:
            _state.seen += arrived
            _end_if_blocked_in_hora()


def _end_if_blocked_in_hora():
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if _state.taken >= _state.seen:
            return   # the main thread took it: KeyboardInterrupt runs its course
        time.sleep(0.02)
    frame = sys._current_frames().get(threading.main_thread().ident)
    if _state.taken >= _state.seen or frame is None or not _in_hora(frame):
        return
    hora_call, caller = _split_at_caller(frame)
    own = caller   # the program's own line that led there (torch may be the caller)
    while own is not None and _in_library(own):
        own = own.f_back
    _print_line(f"{_stopped_at(own or caller)}, waiting in hora's {hora_call}")
    os._exit(128 + signal.SIGINT)


def _in_hora(frame):
    return os.path.abspath(frame.f_code.co_filename).startswith(_HORA_DIR + os.sep)


def _in_library(frame):
    """In hora, an installed library or the standard library: not the
    program's own code."""
    return _in_hora(frame) or os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARY_DIRS)


def _split_at_caller(frame):
    """(name of the outermost hora function, the frame that called it)."""
    name = frame.f_code.co_name
    while frame is not None and _in_hora(frame):
        name = frame.f_code.co_name
        frame = frame.f_back
    return name, frame


def _stopped_at(frame, line=None):
    where = ""
    if frame is not None:
        line = frame.f_lineno if line is None else line
        where = f" at {frame.f_code.co_filename}:{line} (in {frame.f_code.co_name})"
    rank = "" if _state.rank is None else f" rank {_state.rank}"
    return f"KeyboardInterrupt:{rank} stopped{where}"


def _print_line(line):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def report_uncaught(kind, value, traceback):
    """Prints the one line for an uncaught KeyboardInterrupt, or for another
    exception during whose report a SIGINT arrived; True if it did."""
    interrupted = issubclass(kind, KeyboardInterrupt)
    if not interrupted and not _state.taken_while_reporting:
        return False
    # The innermost frame of the program's own code, else the innermost
    # outside hora, else the outermost: the line a user wants to see, not
    # one inside torch or the standard library.
    frame, line, own = None, None, False
    while traceback is not None:
        here = traceback.tb_frame
        if not _in_library(here) or (not own and (frame is None or not _in_hora(here))):
            frame, line, own = here, traceback.tb_lineno, not _in_library(here)
        traceback = traceback.tb_next
    line = _stopped_at(frame, line)
    if not interrupted:
        line += f"; it had just raised {kind.__name__}: {value}"
    _print_line(line)
    return True
