"""Imported last by a fork server in tests/test_lifetime_parent_kill.py: it takes
``DISTLAB_TEST_SLOW_PRELOAD_S`` seconds, as importing torch does on a busy machine, so the
moment a launcher dies while its server still imports lasts long enough to judge on any machine.
"""

from __future__ import annotations

import os
import time

time.sleep(float(os.environ.get("DISTLAB_TEST_SLOW_PRELOAD_S", "0")))
