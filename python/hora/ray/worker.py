"""The Ray actor of one rank (Horovod's BaseHorovodWorker), for RayExecutor
and ElasticRayExecutor: its node, its environment (the driver sets the
variables horarun would), and the function or executable it runs."""

import os
import socket


class Worker:
    """The actor of one rank (Horovod's BaseHorovodWorker)."""

    def __init__(self):
        self.executable = None

    def location(self):
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def hostname(self):
        return socket.gethostname()

    def update_env_vars(self, variables):
        os.environ.update({str(k): str(v) for k, v in variables.items()})

    def env_vars(self):
        return dict(os.environ)

    def start_executable(self, executable_cls=None, executable_args=(), executable_kwargs=None):
        if executable_cls is not None:
            self.executable = executable_cls(*executable_args, **(executable_kwargs or {}))

    def execute(self, fn):
        return fn(self.executable)
