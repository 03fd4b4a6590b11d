"""How long a 4-rank job takes to start on each way of running one: from the
call that starts it to the end of the first collective on every rank,
measured in one run on one machine.

    python benchmarks/engine_startup.py                 # 4 ranks, 3 repeats
    python benchmarks/engine_startup.py --np 2 --repeats 5

Ways (each started from this process):
- horarun: hora.runner.run(fn, np=N), horarun's launcher on this host;
- spark: hora.spark.run(fn, num_proc=N) on a local[N] SparkSession started
  once beforehand (its own start-up is printed apart);
- spark-torch: pyspark's TorchDistributor(num_processes=N).run(fn) on the
  same session, whose ranks init torch.distributed (Gloo) and allreduce:
  the peer on Spark;
- ray: RayExecutor(num_workers=N): start() then run(fn), on a local Ray
  instance started once beforehand (printed apart); the actors are new in
  every repeat.

fn imports hora.numpy, calls hvd.init() and allreduces 4 bytes, and returns
the time its allreduce ended; a way's time is the latest of those minus the
time of the call (the same clock: every rank runs on this host). Prints
the median over repeats, and each way's time over horarun's. Not a test.
"""

import argparse
import os
import statistics
import sys
import time


def first_collective():
    """Runs on every rank: init, one allreduce, the time it ended."""
    import numpy as np

    import hora.numpy as hvd

    hvd.init()
    hvd.allreduce(np.ones(1, dtype=np.float32), op=hvd.Sum)
    done = time.time()
    hvd.shutdown()
    return done


def torch_first_collective():
    """The same under TorchDistributor: torch.distributed with Gloo."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    done = time.time()
    dist.destroy_process_group()
    return done


def timed(start_job):
    started = time.time()
    ends = start_job()
    return max(ends) - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ways", default="horarun,spark,spark-torch,ray")
    args = parser.parse_args()
    ways = args.ways.split(",")
    n = args.np
    times = {way: [] for way in ways}
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    session = ray = None
    starters = {}
    if "horarun" in ways:
        import hora.runner

        starters["horarun"] = lambda: hora.runner.run(first_collective, np=n)
    if "spark" in ways or "spark-torch" in ways:
        from pyspark.sql import SparkSession

        began = time.time()
        session = (SparkSession.builder.master(f"local[{n}]").config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        print(f"SparkSession local[{n}] started in {time.time() - began:.1f} s (not counted)")
        import hora.spark

        starters["spark"] = lambda: hora.spark.run(first_collective, num_proc=n)
        from pyspark.ml.torch.distributor import TorchDistributor

        starters["spark-torch"] = lambda: [TorchDistributor(num_processes=n, local_mode=False, use_gpu=False)
                                           .run(torch_first_collective)]
    if "ray" in ways:
        import ray

        from hora.ray import RayExecutor

        began = time.time()
        ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False)
        print(f"Ray instance of {n} CPUs started in {time.time() - began:.1f} s (not counted)")

        def on_ray():
            executor = RayExecutor(num_workers=n)
            executor.start()
            try:
                return executor.run(first_collective)
            finally:
                executor.shutdown()

        starters["ray"] = on_ray
    for repeat in range(args.repeats):
        for way in ways[repeat % len(ways):] + ways[:repeat % len(ways)]:   # rotate the order
            times[way].append(timed(starters[way]))
    if session is not None:
        session.stop()
    if ray is not None:
        ray.shutdown()

    base = statistics.median(times["horarun"]) if times.get("horarun") else None
    print(f"\n{n} ranks, from the call to the end of the first allreduce on every rank "
          f"(median of {args.repeats}):")
    for way in ways:
        median = statistics.median(times[way])
        ratio = f"  {median / base:.2f}x horarun" if base else ""
        print(f"  {way:<12} {median:6.2f} s{ratio}   (each: {', '.join(f'{t:.2f}' for t in times[way])})")


if __name__ == "__main__":
    main()
