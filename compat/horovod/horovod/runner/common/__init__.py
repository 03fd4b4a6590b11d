"""``horovod.runner.common``: the helpers under ``horovod.runner.common.util``
that scripts and Horovod's tests import."""
