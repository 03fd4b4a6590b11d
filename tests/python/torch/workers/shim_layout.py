"""Horovod's module layout through the hora-horovod package, on each rank of
a 2-rank job: horovod.runner.common.util (env, secret, timeout) and
horovod.torch.mpi_ops._basics."""

import time

import horovod.torch as hvd
from horovod.runner.common.util import secret, timeout
from horovod.runner.common.util.env import get_env_rank_and_size

# Before init, from the launcher's variables.
rank, size = get_env_rank_and_size()
hvd.init(process_sets=[hvd.ProcessSet([0])])
assert (rank, size) == (hvd.rank(), hvd.size()) == (rank, 2), (rank, size)
assert hvd.mpi_ops._basics.rank() == hvd.rank() and hvd.mpi_ops._basics.size() == 2
ids_and_ranks = hvd.mpi_ops._basics._get_process_set_ids_and_ranks()
assert ids_and_ranks == {0: [0, 1], 1: [0]}, ids_and_ranks

key = secret.make_secret_key()
assert len(key) == secret.SECRET_LENGTH
digest = secret.compute_digest(key, b"message")
assert secret.check_digest(key, b"message", digest) and not secret.check_digest(key, b"massage", digest)

deadline = timeout.Timeout(0.01, "Timed out waiting for {activity}.")
assert not deadline.timed_out() and 0 < deadline.remaining() <= 0.01
time.sleep(0.02)
try:
    deadline.check_time_out_for("the tasks")
    raise AssertionError("no TimeoutException")
except timeout.TimeoutException as error:
    assert str(error) == "Timed out waiting for the tasks.", error
hvd.shutdown()
print("layout ok", flush=True)
