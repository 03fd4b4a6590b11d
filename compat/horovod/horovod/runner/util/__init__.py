"""Helpers under ``horovod.runner.util`` that user and test code import."""
