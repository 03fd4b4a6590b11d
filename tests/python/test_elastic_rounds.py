"""Which of the driver's rounds an elastic worker joins
(hora.common.elastic_rounds._choose_round), over a store held in a dict."""

import json

from hora.common.elastic_rounds import _choose_round
from hora.runner import rounds


class DictStore:
    def __init__(self, assignments, joined):
        self.values = {rounds.assignment_key(r): json.dumps(a) for r, a in assignments.items()}
        self.values.update({rounds.joined_key(w): str(r) for w, r in joined.items()})

    def get(self, key, timeout=None):
        if key not in self.values:
            raise TimeoutError(key)
        return self.values[key]


def member(rank):
    return [rank, 3, rank, 1, 0, 3]


def test_the_newest_round_with_the_worker_when_nobody_waits_in_an_older_one():
    store = DictStore({1: {"a": member(0), "b": member(1), "c": member(2)},
                       2: {"a": member(0), "b": member(1)}}, joined={})
    assert _choose_round(store, "a", 1, 2, 1.0)[0] == 2


def test_a_worker_joins_the_members_already_waiting_in_an_older_round():
    # The job grew twice in quick succession: a and b joined round 1, which
    # waits for c; c must meet them there, not in round 2 (which waits for them).
    store = DictStore({1: {"a": member(0), "b": member(1), "c": member(2)},
                       2: {"a": member(0), "b": member(1), "c": member(2), "d": member(3)}},
                      joined={"a": 1, "b": 1})
    assert _choose_round(store, "c", 1, 2, 1.0)[0] == 1
    # d is not in round 1: it waits in round 2 for the others to move on.
    assert _choose_round(store, "d", 1, 2, 1.0)[0] == 2


def test_an_older_round_that_a_member_left_is_skipped():
    store = DictStore({1: {"a": member(0), "b": member(1), "c": member(2)},
                       2: {"a": member(0), "b": member(1), "c": member(2)}},
                      joined={"a": 1, "b": 2})
    assert _choose_round(store, "c", 1, 2, 1.0)[0] == 2


def test_no_round_with_the_worker():
    store = DictStore({1: {"a": member(0)}}, joined={})
    assert _choose_round(store, "z", 1, 1, 1.0) is None
