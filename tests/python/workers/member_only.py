"""Creating and using a set involves its members only: while ranks 0 and 1
create and use [0, 1], rank 2 sits in a barrier of its own set [2, 3] that
rank 3 joins only after [0, 1] has worked. If creating [0, 1] needed rank 2
or 3, nothing could finish. Run on 4 ranks; argv[1] is a fresh folder."""

import os
import sys
import time

import numpy as np

import hora.numpy as hvd

signal_file = os.path.join(sys.argv[1], "pair-done")
hvd.init()
me = hvd.rank()
pair = hvd.ProcessSet([0, 1])
others = hvd.ProcessSet([2, 3])

if me in (0, 1):
    start = time.monotonic()
    added = hvd.add_process_set(pair)
    total = added.allreduce(np.array([me + 1.0]), op=hvd.Sum)
    np.testing.assert_array_equal(total, [3.0])
    print(f"rank {me}: pair created and used in {time.monotonic() - start:.3f} s", flush=True)
    if me == 0:
        with open(signal_file + ".tmp", "w") as f:
            f.write("done")
        os.rename(signal_file + ".tmp", signal_file)
else:
    if me == 3:
        deadline = time.monotonic() + 60
        while not os.path.exists(signal_file):
            assert time.monotonic() < deadline, "the pair [0, 1] never finished"
            time.sleep(0.01)
    others.barrier()  # rank 2 waits here the whole time
    assert pair.process_set_id is None  # never registered on a non-member
    print(f"rank {me}: own set done", flush=True)

hvd.barrier()
hvd.shutdown()
print("done", flush=True)
