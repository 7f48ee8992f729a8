"""`import rllib_geppo` makes "GePPO" known to Tune in every Ray session of a process."""

import subprocess
import sys

SCRIPT = """
import ray, rllib_geppo
from ray.tune.registry import get_trainable_cls
for _ in range(2):
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    assert get_trainable_cls("GePPO") is rllib_geppo.GePPO
    ray.shutdown()
print("ok")
"""


def test_geppo_stays_registered_across_ray_sessions():
    # A fresh interpreter: the test session's own Ray must not interfere.
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
