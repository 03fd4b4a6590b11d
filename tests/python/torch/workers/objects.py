"""broadcast_object and allgather_object move what cloudpickle can pickle:
lambdas, closures and classes defined inside a function, on the global set
and on [1, 2, 3]. 4 ranks."""

import pickle

import torch

import hora.torch as hvd

hvd.init()
me = hvd.rank()


def make_payload(rank):
    class Local:   # defined in a function: plain pickle refuses it
        def __init__(self, value):
            self.value = value

    offset = 10 * rank
    return {"scale": lambda x: x + offset, "local": Local(rank), "tensor": torch.full((2,), float(rank))}


mine = make_payload(me)
try:
    pickle.dumps(mine)
    raise AssertionError("plain pickle took the payload; the check would prove nothing")
except (pickle.PicklingError, AttributeError):
    pass

for ps in (hvd.global_process_set, hvd.ProcessSet([1, 2, 3])):
    if not ps.included():
        continue
    root = ps.ranks[-1]
    got = hvd.broadcast_object(mine, root_rank=root, process_set=ps)
    assert got["scale"](1) == 1 + 10 * root and got["local"].value == root, got
    assert type(got["local"]).__name__ == "Local" and torch.equal(got["tensor"], torch.full((2,), float(root)))
    everyone = hvd.allgather_object(mine, process_set=ps)
    assert [o["scale"](0) for o in everyone] == [10 * r for r in ps.ranks]
    assert [o["local"].value for o in everyone] == ps.ranks
    print(f"objects on {ps.ranks} ok", flush=True)
hvd.shutdown()
