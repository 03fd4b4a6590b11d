"""``horovod.torch`` is ``hora.torch``: the same functions, classes and constants."""

from hora.torch import *  # noqa: F401,F403
from hora.torch import __all__  # noqa: F401
