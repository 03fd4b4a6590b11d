"""The parts of ``horovod.common`` that training scripts import."""
