"""hora: distributed training on process sets, with Horovod's API.

Front ends: ``hora.numpy`` (NumPy arrays) and ``hora.torch`` (PyTorch).
The launcher is ``horarun``.
"""

__version__ = "0.1.0"
