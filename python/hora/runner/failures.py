"""What horarun says at the end of a failed job: which rank failed first and
why, and which ranks failed only because of it.

The launcher keeps, for each rank, the last lines of its stderr with the
time each was read (StderrTail), its exit status and time, and when it
signalled the rank. From these, summary() classifies each failed rank:

- a consequence: its last Python exception, or one it was raised from, is
  a PeerFailureError (a peer it needed died, hung or broke the process set;
  the message names the set and the missing ranks), or a TimeoutError that
  names members which never reached the set's creation ("global rank 1 has
  not called hvd.init() after 30 s": src/runtime/set_presence.cc);
- stopped: it failed only after horarun signalled it, without an error of
  its own before;
- a cause: anything else (another exception, an exit code, a signal).

The root cause is the cause that failed first, by the time its traceback
was read or, without one, the time it exited; timing alone would often
blame a survivor, which can exit before the rank that crashed has finished
its own shutdown. When no rank failed on its own, the ranks that the
PeerFailureErrors name as missing, or that the TimeoutErrors name as not
having called hvd.init() (or add_process_set), are reported instead; where
the errors say that ranks became unreachable (their hosts answered nothing
for HORA_LINK_TIMEOUT_SECONDS), the hosts that lost each other are.
"""

import collections
import dataclasses
import re
import signal

TAIL_LINES = 200          # lines of stderr kept per rank
SHOWN_LINES = 20          # lines of the root cause's stderr in the summary
MAX_LINE_CHARS = 2000     # a longer line is cut (a rank printing a huge array)
MAX_ERROR_CHARS = 400     # an error message quoted in a summary line

TRACEBACK_HEADER = "Traceback (most recent call last):"
INTERRUPT_LINE = re.compile(r"^KeyboardInterrupt\b")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(:|$)")
PEER_FAILURE = re.compile(r"\bPeerFailureError\b")
SET_TEXT = re.compile(r"process set (\d+) \[([\d, ]*)\]")
MISSING_RANKS = re.compile(r"missing global rank\(s\) \[([\d, ]*)\]")
ABSENT_RANK = re.compile(r"global rank (\d+) has not called (hvd\.init\(\)|add_process_set\(\[[\d, ]*\]\))")
ALIVE_TEXT = "(its process is alive)"
# src/runtime/coordinator_loop.cc and member_loop.cc
UNREACHABLE = re.compile(r"global rank (\d+),? is unreachable: no answer from .+? for ([\d.]+ s)")


class StderrTail:
    """The last TAIL_LINES lines of one rank's stderr, with the time each
    was read (time.monotonic())."""

    def __init__(self):
        self.lines = collections.deque(maxlen=TAIL_LINES)

    def add(self, line, when):
        text = line.decode(errors="replace").rstrip("\r\n")
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + " ..."
        self.lines.append((when, text))


@dataclasses.dataclass
class RankOutcome:
    """One rank at the end of the job, as the launcher saw it."""
    rank: int
    code: int                    # Popen.returncode: negative for a signal
    exited_at: float             # time.monotonic() when it was reaped
    signalled_at: float = None   # when horarun first signalled it, if it did
    tail: StderrTail = dataclasses.field(default_factory=StderrTail)
    host: str = None             # the host it ran on, where known


@dataclasses.dataclass
class PeerFailure:
    """What a PeerFailureError says: the set, its members, the missing
    ranks; or what a TimeoutError about absent members says: then `kind` is
    'TimeoutError' and `not_called` maps each missing rank to (the call it
    had not made, whether its process had already ended)."""
    set_id: int = None
    members: tuple = ()
    missing: tuple = ()
    kind: str = "PeerFailureError"
    not_called: dict = dataclasses.field(default_factory=dict)
    unreachable: tuple = ()      # ranks whose hosts answered nothing
    silence: str = None          # for how long ("3 s")

    def set_text(self):
        if self.set_id is None:
            return None
        return f"process set {self.set_id} [{', '.join(map(str, self.members))}]"


@dataclasses.dataclass
class Failure:
    """A failed rank, classified."""
    outcome: RankOutcome
    kind: str                    # "cause", "consequence" or "stopped"
    error: str = None            # its last exception line, if any
    failed_at: float = None
    peer: PeerFailure = None

    @property
    def rank(self):
        return self.outcome.rank


def describe_exit(code):
    """'exited with code 3' or 'killed by signal 9 (SIGKILL)'."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"killed by signal {-code}"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


def _ranks(text):
    return tuple(int(r) for r in text.split(",") if r.strip())


def parse_peer_failure(error):
    """The set and missing ranks a PeerFailureError message names."""
    peer = PeerFailure()
    found = SET_TEXT.search(error)
    if found:
        peer.set_id, peer.members = int(found.group(1)), _ranks(found.group(2))
    missing = MISSING_RANKS.search(error)
    if missing:
        peer.missing = _ranks(missing.group(1))
    unreachable = UNREACHABLE.findall(error)
    if unreachable:
        peer.unreachable = tuple(int(rank) for rank, _ in unreachable)
        peer.silence = unreachable[0][1]
    return peer


def parse_absence(error, kind="TimeoutError"):
    """The set and the absent members a TimeoutError message (or the
    PeerFailureError of members whose processes ended) names."""
    peer = parse_peer_failure(error)
    peer.kind = kind
    found = list(ABSENT_RANK.finditer(error))
    for index, match in enumerate(found):
        rest = error[match.end():found[index + 1].start() if index + 1 < len(found) else len(error)]
        ended = "(its process " in rest and ALIVE_TEXT not in rest
        peer.not_called.setdefault(int(match.group(1)), (match.group(2), ended))
    peer.missing = tuple(peer.not_called)
    return peer


CHAIN_LINES = ("During handling of the above exception, another exception occurred:",
               "The above exception was the direct cause of the following exception:")


def _exception_line(lines, header):
    """The exception line of the traceback that starts at `header`."""
    for _, text in lines[header + 1:]:
        if text and not text[0].isspace() and EXCEPTION_LINE.match(text):
            return text
    return None


def _chain_start(lines, headers):
    """The first header of the exception chain that the last header ends."""
    position = len(headers) - 1
    while position > 0:
        previous = [text for _, text in lines[headers[position - 1] + 1:headers[position]] if text.strip()]
        if not previous or previous[-1] not in CHAIN_LINES:
            break
        position -= 1
    return position


def last_error(lines):
    """(exception line, every exception line of its chain, time its report
    was read) for the last Python exception report in `lines` [(time,
    text)], or for a one-line KeyboardInterrupt report; (None, [], None)
    without either."""
    headers = [i for i, (_, text) in enumerate(lines) if text == TRACEBACK_HEADER]
    if headers:
        chain = headers[_chain_start(lines, headers):]
        errors = [e for e in (_exception_line(lines, h) for h in chain) if e is not None]
        return _exception_line(lines, headers[-1]), errors, lines[chain[0]][0]
    for when, text in reversed(lines):
        if INTERRUPT_LINE.match(text):
            return text, [text], when
    return None, [], None


def classify(outcome):
    """The Failure for a rank that exited with a nonzero status."""
    error, chain, error_at = last_error(list(outcome.tail.lines))
    peer_errors = [e for e in chain if PEER_FAILURE.search(e)]
    if peer_errors and ABSENT_RANK.search(peer_errors[-1]):
        # Members that never arrived and whose processes ended: they are the cause.
        return Failure(outcome, "consequence", peer_errors[-1], error_at,
                       parse_absence(peer_errors[-1], kind="PeerFailureError"))
    if peer_errors:
        # Reported by its PeerFailureError, which names the set and the peer.
        return Failure(outcome, "consequence", peer_errors[-1], error_at, parse_peer_failure(peer_errors[-1]))
    absence_errors = [e for e in chain if ABSENT_RANK.search(e)]
    if absence_errors:
        # It waited for members that never arrived: they are the cause.
        return Failure(outcome, "consequence", absence_errors[-1], error_at, parse_absence(absence_errors[-1]))
    failed_at = error_at if error_at is not None else outcome.exited_at
    if outcome.signalled_at is not None and failed_at >= outcome.signalled_at:
        return Failure(outcome, "stopped", error, failed_at)
    return Failure(outcome, "cause", error, failed_at)


def _rank_list(ranks):
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {', '.join(map(str, ranks))}"


def _short(text):
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " ..."


class Summary:
    """The classified failures of a job and the lines that report them."""

    def __init__(self, outcomes):
        self.outcomes = {o.rank: o for o in outcomes}
        failed = [classify(o) for o in outcomes if o.code != 0]
        self.failures = {f.rank: f for f in failed}
        causes = sorted((f for f in failed if f.kind == "cause"), key=lambda f: (f.failed_at, f.rank))
        self.root = causes[0] if causes else None
        self.other_causes = causes[1:]

    def exit_status(self):
        """The root cause's status, unless horarun's own signal ended it
        (then the first failure's by exit time); 0 when no rank failed."""
        if not self.failures:
            return 0
        first_exit = min(self.failures.values(), key=lambda f: (f.outcome.exited_at, f.rank))
        code = first_exit.outcome.code
        root = self.root
        if root is not None and not (root.outcome.signalled_at is not None and root.outcome.code < 0):
            code = root.outcome.code
        return code if code > 0 else 128 - code

    def sets_of(self, rank):
        """The process sets (as text) that the job's PeerFailureErrors put
        `rank` in: its own error's set, and every set that names it missing."""
        sets = []
        for failure in self.failures.values():
            peer = failure.peer
            if peer is None or peer.set_text() is None:
                continue
            if failure.rank == rank or rank in peer.missing:
                if peer.set_text() not in sets:
                    sets.append(peer.set_text())
        return sets

    def not_called(self, rank):
        """(the call, whether its process had ended) that a TimeoutError says
        `rank` had not made when its peers gave up waiting, or None."""
        for failure in self.failures.values():
            if failure.peer is not None and rank in failure.peer.not_called:
                return failure.peer.not_called[rank]
        return None

    def named_missing(self):
        """Ranks that the PeerFailureErrors name as missing (or the
        TimeoutErrors as absent), in order."""
        ranks = []
        for failure in self.failures.values():
            for rank in (failure.peer.missing if failure.peer else ()):
                if rank not in ranks:
                    ranks.append(rank)
        return ranks

    def lines(self, keep_going):
        """The summary, one string per line (without 'horarun: ')."""
        lines = []
        if keep_going:
            lines += [self._status_line(rank) for rank in sorted(self.outcomes)]
        if not self.failures:
            return lines
        if self.root is not None:
            lines += self._tail_block(self.root)
        if not keep_going:
            lines += self._grouped_lines()
        lines.append(self._verdict())
        return lines

    def _exit_text(self, rank):
        """'exited with code 3', with ' before calling hvd.init()' where a
        peer's TimeoutError says the process had ended without that call."""
        text = describe_exit(self.outcomes[rank].code)
        absent = self.not_called(rank)
        if absent is not None and absent[1]:
            text += f" before calling {absent[0]}"
        return text

    def _status_line(self, rank):
        line = f"rank {rank} {self._exit_text(rank)}"
        failure = self.failures.get(rank)
        if failure is None:
            return line
        sets = self.sets_of(rank)
        where = f" (in {', '.join(sets)})" if sets else ""
        if failure is self.root:
            return f"{line}: the first rank to fail{where}"
        if failure.kind == "consequence":
            return f"{line}: {failure.peer.kind} because of {self._blamed(failure)}{where}"
        if failure.kind == "stopped":
            return f"{line}: stopped by horarun"
        return f"{line}: {_short(failure.error)}{where}" if failure.error else line + where

    def _blamed(self, failure):
        missing = failure.peer.missing if failure.peer else ()
        if missing:
            return _rank_list(missing)
        return f"rank {self.root.rank}" if self.root else "a peer"

    def _tail_block(self, failure):
        shown = [text for _, text in list(failure.outcome.tail.lines)[-SHOWN_LINES:]]
        if not shown:
            return [f"rank {failure.rank} failed first; it wrote nothing on stderr"]
        what = "line" if len(shown) == 1 else f"{len(shown)} lines"
        return [f"rank {failure.rank} failed first; the last {what} of its stderr:"] + ["    " + t for t in shown]

    def _grouped_lines(self):
        lines = []
        same = [f.rank for f in self.other_causes if f.error and f.error == self.root.error]
        if same:
            lines.append(f"{_rank_list(same)} failed with the same error")
        for failure in self.other_causes:
            if failure.rank not in same:
                error = f": {_short(failure.error)}" if failure.error else ""
                lines.append(f"rank {failure.rank} also failed: {self._exit_text(failure.rank)}{error}")
        by_error = collections.defaultdict(list)
        for failure in self.failures.values():
            if failure.kind == "consequence":
                by_error[(self._blamed(failure), failure.error)].append(failure.rank)
        for (blamed, error), ranks in by_error.items():
            lines.append(f"{_rank_list(ranks)} failed because of {blamed}: {_short(error)}")
        # A rank the others name as missing is reported as the cause instead.
        missing = self.named_missing() if self.root is None else []
        stopped = [f.rank for f in self.failures.values() if f.kind == "stopped" and f.rank not in missing]
        if stopped:
            lines.append(f"{_rank_list(stopped)} stopped by horarun after the failure")
        return lines

    def _verdict(self):
        root = self.root
        host_lost = self._host_lost()
        if host_lost:
            return host_lost
        if root is not None:
            error = f": {_short(root.error)}" if root.error else ""
            status = self._exit_text(root.rank)
            if root.outcome.signalled_at is not None:
                status += " when horarun stopped it"
            return f"rank {root.rank} {status} (the first rank to fail){error}"
        lost = self._lost_hosts()
        if lost:
            return "no rank failed on its own: " + lost
        missing = self.named_missing()
        if missing:
            return "no rank failed on its own: " + "; ".join(self._missing_clauses(missing))
        first = min(self.failures.values(), key=lambda f: (f.outcome.exited_at, f.rank))
        return f"rank {first.rank} {describe_exit(first.outcome.code)} (the first rank to fail)"

    def _missing_clauses(self, missing):
        """What the verdict says of each rank the others' errors name, when
        no rank failed on its own."""
        absent = [rank for rank in missing if self.not_called(rank) is not None]
        clauses = []
        for rank in absent:
            waiters = [f.rank for f in self.failures.values() if f.peer is not None and rank in f.peer.not_called]
            clauses.append(f"rank {rank} had not called {self.not_called(rank)[0]} when {_rank_list(waiters)} "
                           f"gave up waiting for it ({self._state(rank)})")
        others = [rank for rank in missing if rank not in absent]
        if others:
            states = ", ".join(f"rank {rank} ({self._state(rank)})" for rank in others)
            clauses.append(f"the others' PeerFailureError names {states}; it may have hung, ended early or "
                           "run different code")
        return clauses

    def _host_lost(self):
        """'every rank on host h (ranks 2, 3) failed: killed by signal 9
        (SIGKILL)' when the first failure was one of a host's several ranks,
        killed by a signal without an error of its own, and every rank there
        died alike, without horarun's signal; else None (a Python error on
        every rank is the program's, not the host's)."""
        root = self.root
        if (root is None or root.outcome.host is None or root.outcome.signalled_at is not None
                or root.outcome.code >= 0 or root.error is not None):
            return None
        ranks = [r for r, o in self.outcomes.items() if o.host == root.outcome.host]
        same = [self.failures.get(r) for r in ranks]
        if len(ranks) < 2 or len(ranks) == len(self.outcomes):
            return None
        if any(f is None or f.kind != "cause" or f.outcome.code != root.outcome.code for f in same):
            return None
        return f"every rank on host {root.outcome.host} ({_rank_list(ranks)}) failed: {self._exit_text(root.rank)}"

    def _lost_hosts(self):
        """What the verdict says when errors name ranks whose hosts answered
        nothing: the host cut off from the others, or hosts that lost each
        other; None when no error says so."""
        reports = [(f.rank, target, f.peer.silence) for f in self.failures.values() if f.peer
                   for target in f.peer.unreachable]
        if not reports:
            return None
        host = {rank: outcome.host for rank, outcome in self.outcomes.items() if outcome.host}
        silence = reports[0][2]
        named_by = collections.defaultdict(set)   # host -> the other hosts that lost it
        for reporter, target, _ in reports:
            if reporter in host and target in host and host[reporter] != host[target]:
                named_by[host.get(target)].add(host.get(reporter))
        if not named_by:
            return None
        involved = set(named_by) | set().union(*named_by.values())
        most = max(len(reporters) for reporters in named_by.values())
        cut = sorted(h for h, reporters in named_by.items() if len(reporters) == most)
        why = (f"no answer for {silence} (HORA_LINK_TIMEOUT_SECONDS): a host is down or the network between "
               "the hosts is cut")

        def with_ranks(h):
            return f"{h} ({_rank_list(r for r, name in host.items() if name == h)})"

        if set(cut) == involved:
            return f"hosts {' and '.join(with_ranks(h) for h in cut)} lost each other: {why}"
        others = sorted(involved - set(cut))
        return (f"host {', '.join(with_ranks(h) for h in cut)} became unreachable from "
                f"{', '.join(with_ranks(h) for h in others)}: {why}")

    def _state(self, rank):
        outcome = self.outcomes.get(rank)
        if outcome is None:
            return "not started"
        if outcome.signalled_at is not None and outcome.exited_at >= outcome.signalled_at:
            return "still running; stopped by horarun"
        return describe_exit(outcome.code)
