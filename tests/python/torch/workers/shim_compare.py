"""Runs horovod_script.py as it is (on the hora-horovod package, which must be
on the path), then the same script with `import hora.torch as hvd`, in one
job; both must give the same numbers. Run on 4 ranks."""

import math
import os
import runpy

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "horovod_script.py")

shimmed = runpy.run_path(SCRIPT, run_name="__main__")
assert shimmed["hvd"].__name__ == "horovod.torch", shimmed["hvd"]
source = open(SCRIPT).read()
assert source.count("import horovod.torch as hvd") == 1
native = {"__name__": "__main__"}
exec(compile(source.replace("import horovod.torch as hvd", "import hora.torch as hvd"), SCRIPT, "exec"), native)
assert native["hvd"].__name__ == "hora.torch", native["hvd"]
# Equal up to rounding: which allreduces the core fuses depends on timing, and
# a fused sum may round differently in the last bit.
assert math.isclose(native["checksum"], shimmed["checksum"], rel_tol=1e-12), (native["checksum"],
                                                                             shimmed["checksum"])
for a, b in zip(native["losses"], shimmed["losses"], strict=True):
    assert math.isclose(a, b, rel_tol=1e-12), (native["losses"], shimmed["losses"])
print(f"rank {native['hvd'].rank()} same numbers: losses {shimmed['losses']}, checksum {shimmed['checksum']!r}",
      flush=True)
native["hvd"].shutdown()
