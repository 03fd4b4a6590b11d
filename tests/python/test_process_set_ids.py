"""Process set ids (docs/process_sets.md): equal on members and non-members,
the same on every run, never reused; a non-member's remove returns at once."""

import ast
import re

# Ids the lowest member computes: first_dynamic_id + sequence * size + rank.
# Ranks 0 and 1 end with their pair [0, 1], ranks 2 and 3 with [2, 3].
EXPECTED_LOW = [1, 5, 2, 6, 9, 13, [3, 13]]
EXPECTED_HIGH = [1, 5, 2, 6, 9, 3, [3, 13]]


def ids_by_rank(stdout):
    # horarun prefixes "[rank]:", mpirun "[job,rank]<stdout>:".
    found = dict(re.findall(r"\[(?:\d+,)?(\d+)\](?:<stdout>)?:ids (\[[^\n]*?\]\])", stdout))
    assert sorted(found) == ["0", "1", "2", "3"], stdout
    return {int(rank): ast.literal_eval(text) for rank, text in found.items()}


def test_ids_are_shared_deterministic_and_never_reused(run_worker):
    # Two runs in which a different pair creates its set first.
    first = ids_by_rank(run_worker("process_set_ids.py", args=["0"]).stdout)
    second = ids_by_rank(run_worker("process_set_ids.py", args=["2"]).stdout)
    assert first == second
    assert first == {0: EXPECTED_LOW, 1: EXPECTED_LOW, 2: EXPECTED_HIGH, 3: EXPECTED_HIGH}
