"""Sets across hosts: 4 ranks claim two hosts (workers/claimed_hosts.py), so
that the global set and [1, 2, 3] span both and are composed of shared
memory inside each host and the network between them. Every collective of
workers/collectives.py must give the numbers it gives on one host, under
each backend."""

import pytest


@pytest.mark.parametrize("layout", ["blocks", "interleaved"])
def test_every_collective_over_two_claimed_hosts(run_worker, layout):
    result = run_worker("claimed_hosts.py", args=[layout, "collectives.py"])
    for label, count in (("global", 4), ("even", 2), ("odd", 2), ("upper", 3), ("solo", 1)):
        assert result.stdout.count(f"set {label} ok") == count, result.stdout
