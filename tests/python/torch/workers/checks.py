"""Assertions the torch workers share: those of tests/python/workers/checks.py."""

import importlib.util
import os

_SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "workers", "checks.py")
_spec = importlib.util.spec_from_file_location("hora_test_checks", _SHARED)
_checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_checks)

raises = _checks.raises
