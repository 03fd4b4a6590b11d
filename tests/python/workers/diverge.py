"""The ranks of the global set diverge: each waits on an op the others never
submit. Run on 2 or 4 ranks:

    diverge.py typo     the last rank allreduces 'Loss', the others 'loss'
    diverge.py kinds    rank 0 broadcasts 'state', the others allreduce 'grad'

The op each rank waits on fails alone (MismatchError); then every rank
allreduces 'after', which the set still runs. Every rank prints
``RESULT <json>`` with the error's type and text and the sum it got.
"""

import json
import sys

import numpy as np

import hora.numpy as hvd
from hora.errors import HoraError

mode = sys.argv[1]
hvd.init()
me, last = hvd.rank(), hvd.size() - 1
x = np.ones(4, dtype=np.float32)
result = {"rank": me}
try:
    if mode == "typo":
        hvd.allreduce(x, name="Loss" if me == last else "loss")
    elif me == 0:
        hvd.broadcast(np.arange(3, dtype=np.int64), root_rank=0, name="state")
    else:
        hvd.allreduce(x, name="grad")
    result["error"] = None
except HoraError as error:
    result["error"], result["error_type"] = str(error), type(error).__name__
result["after"] = hvd.allreduce(np.full(2, me + 1, dtype=np.float32), name="after", op=hvd.Sum).tolist()
print("RESULT " + json.dumps(result), flush=True)
