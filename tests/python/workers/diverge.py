"""The ranks of the global set diverge: each waits on an op the others never
submit. Run on 2 or 4 ranks:

    diverge.py typo     the last rank allreduces 'Loss', the others 'loss'
    diverge.py kinds    rank 0 broadcasts 'state', the others allreduce 'grad'

Every rank prints ``RESULT <json>`` with the PeerFailureError's text.
"""

import json
import sys

import numpy as np

import hora.numpy as hvd
from hora.errors import PeerFailureError

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
except PeerFailureError as error:
    result["error"] = str(error)
print("RESULT " + json.dumps(result), flush=True)
