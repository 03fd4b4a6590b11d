"""Ranks placed on a crowded machine (docs/launcher.md, HORA_BIND): four
ranks claiming two hosts on a machine with fewer CPUs hold every thread on
the CPU of their place, a host's ranks together, and get the CPUs back at
shutdown; with HORA_BIND=none, or when the ranks share one host, hora
leaves them where they are (workers/placement.py checks each rank)."""

import pytest


@pytest.mark.parametrize("layout", ["blocks", "interleaved"])
def test_ranks_of_hosts_sharing_a_crowded_machine_are_placed_host_by_host(run_worker, layout):
    result = run_worker("claimed_hosts.py", args=[layout, "placement.py", layout, "placed"])
    assert result.stdout.count(" ok") == 4, result.stdout


def test_ranks_stay_where_they_are_when_asked_or_on_one_host(run_worker):
    result = run_worker("claimed_hosts.py", args=["blocks", "placement.py", "blocks", "untouched"],
                        env={"HORA_BIND": "none"})
    assert result.stdout.count(" ok") == 4, result.stdout
    result = run_worker("placement.py", args=["one", "untouched"])
    assert result.stdout.count(" ok") == 4, result.stdout
