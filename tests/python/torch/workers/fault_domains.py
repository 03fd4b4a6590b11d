"""Two hora.torch tasks train side by side with DistributedOptimizer while one
rank dies. Run on 4 ranks under ``horarun --keep-going``:

    fault_domains.py MODE OUTDIR      MODE: none or kill

Sets A=[0, 1] and B=[2, 3] each train their own model. With ``kill``, rank 1
SIGKILLs itself in the middle of a step (after its backward pass has started
A's gradient allreduces). Each surviving rank prints ``RESULT <json>``: its
final parameters (float.hex strings, so runs compare exactly) or the
HorovodInternalError that A's training ended with, and whether a new set
over the survivors works.
"""

import json
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd

STEPS, FAIL_STEP = 40, 10

mode, outdir = sys.argv[1], sys.argv[2]
a, b = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
hvd.init(process_sets=[a, b])
torch.set_num_threads(1)
me = hvd.rank()
my_set = a if a.included() else b
result = {"rank": me}

torch.manual_seed(my_set.process_set_id)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).double()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                     named_parameters=model.named_parameters(), process_set=my_set)
generator = torch.Generator().manual_seed(100 * my_set.process_set_id + my_set.rank())
x = torch.randn(64, 16, generator=generator, dtype=torch.float64)
y = x.sum(dim=1, keepdim=True).sin()


def die_mid_step():
    # The gradient hooks have submitted A's allreduces; rank 0 now waits
    # for rank 1's half of them.
    with open(os.path.join(outdir, "event.json"), "w") as f:
        json.dump({"time": time.time()}, f)
    os.kill(os.getpid(), signal.SIGKILL)


try:
    for step in range(STEPS):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        if mode == "kill" and me == 1 and step == FAIL_STEP:
            die_mid_step()
        optimizer.step()
    result["params"] = [float(v).hex() for p in model.parameters() for v in p.detach().reshape(-1)]
except hvd.HorovodInternalError as error:
    with open(os.path.join(outdir, "event.json")) as f:
        result["set_failure"] = {"message": str(error), "type": type(error).__name__,
                                 "after_event_seconds": time.time() - json.load(f)["time"]}
    result["removed"] = hvd.remove_process_set(my_set)

if mode == "kill" and me != 1:
    # Once A's survivor is done with it, the survivors make a new set.
    open(os.path.join(outdir, f"ready.{me}"), "w").close()
    while not all(os.path.exists(os.path.join(outdir, f"ready.{r}")) for r in (0, 2, 3)):
        time.sleep(0.01)
    survivors = hvd.add_process_set([0, 2, 3])
    result["survivors_sum"] = float(hvd.allreduce(torch.tensor([float(me)]), op=hvd.Sum, process_set=survivors))
print("RESULT " + json.dumps(result), flush=True)
