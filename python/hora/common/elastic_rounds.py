"""An elastic worker's side of the driver's rounds (hora.runner.rounds):
which round is the newest, and joining the first one after the last joined
that includes this worker. Joining gives a Config with the worker's rank,
size, local and cross rank in that round; init() hands it to the core.
The caller's thread; joining blocks until such a round exists."""

import dataclasses
import json
import time

from hora.common.session import session
from hora.runner import rounds
from hora.runner.rendezvous import RendezvousClient


def current_round():
    """The round this process joined last (-1: none yet)."""
    return session.joined_round


def _client(config):
    found = config.store_address()
    if found is None:
        raise ValueError("an elastic worker needs the job's rendezvous server (HORA_RENDEZVOUS_ADDR, "
                         "HORA_RENDEZVOUS_PORT and HORA_SECRET, which horarun sets)")
    return RendezvousClient(*found)


def newest_round(config=None):
    """The driver's newest round (-1 before the first)."""
    with _client(config or session.config) as client:
        try:
            return int(client.get(rounds.ROUND_KEY, timeout=0))
        except TimeoutError:
            return -1


def _joined(client, worker):
    """The round `worker` joined last (-1: none yet)."""
    try:
        return int(client.get(rounds.joined_key(worker), timeout=0))
    except TimeoutError:
        return -1


def _choose_round(client, worker, first, newest, timeout):
    """(round, assignment) for `worker` among rounds `first` .. `newest`, or
    None when none includes it. The newest that includes it, unless an older
    one that includes it has members waiting in it already (they joined it,
    and none of its members has moved past it): the worker joins them there,
    so that rounds published in quick succession (the job growing twice)
    cannot split the workers between two rounds that each wait for the
    others. The members move on to the newer round together afterwards."""
    assignments = {}
    for round_ in range(first, newest + 1):
        assignment = json.loads(client.get(rounds.assignment_key(round_), timeout=timeout))
        if worker in assignment:
            assignments[round_] = assignment
    for round_, assignment in sorted(assignments.items()):
        if round_ == newest:
            break
        joined = [_joined(client, member) for member in assignment if member != worker]
        if round_ in joined and max(joined) == round_:
            return round_, assignment
    if newest in assignments:
        return newest, assignments[newest]
    return None


def join_round(config):
    """Waits for the first round after the one this process joined last
    that includes this worker (the newest such one, unless members already
    wait in an older one: _choose_round); returns ``config`` with the
    worker's coordinates in that round and the round's number."""
    worker = config.worker_id
    deadline = time.monotonic() + config.elastic_timeout
    with _client(config) as client:
        wanted = session.joined_round + 1
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"elastic worker {worker}: no rendezvous round after round "
                                   f"{session.joined_round} included it within {config.elastic_timeout:g} s "
                                   f"({rounds.TIMEOUT_VARIABLE})")
            try:
                newest = int(client.get(rounds.ROUND_KEY, timeout=min(left, 1.0)))
            except TimeoutError:
                continue
            if newest < wanted:
                time.sleep(0.02)
                continue
            chosen = _choose_round(client, worker, wanted, newest, left)
            if chosen is None:
                wanted = newest + 1   # no round with this worker: wait for one with it
                continue
            round_, assignment = chosen
            coordinates = dict(zip(rounds.COORDINATES, (int(v) for v in assignment[worker])))
            client.set(rounds.joined_key(worker), str(round_))
            session.joined_round = round_
            return dataclasses.replace(config, elastic_round=round_, **coordinates)
