"""The test session's one local Ray, shared by every test module that needs one.

Ray takes seconds to start, so the session starts it once, when a module first asks for
``local_ray``, and keeps it. It has :data:`RAY_CPUS` logical CPUs, enough for the largest
request of any test (several learners beside EnvRunners): Ray counts CPUs as resources, so on a
2-core machine more actors only share the cores. A module that starts a Ray of its own (the
command line run in-process, the simulated cluster) asks for ``no_ray``, which shuts the shared
one down; the next module that asks for ``local_ray`` starts it again. Modules run folder by
folder, so that happens about once a session.

Tune keeps registered environments in the Ray session: a module registers its own in a fixture
that uses ``local_ray``, never at import.
"""

import os

import pytest
import ray

#: The shared Ray's logical CPUs (see the module docstring).
RAY_CPUS = max(8, os.cpu_count() or 1)


@pytest.fixture(scope="module")
def local_ray() -> None:
    """The session's local Ray, started if it is not running."""
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False)


@pytest.fixture(scope="module")
def no_ray() -> None:
    """No Ray in this process: for tests whose code starts and stops its own."""
    if ray.is_initialized():
        ray.shutdown()


def pytest_sessionfinish(session, exitstatus) -> None:
    if ray.is_initialized():
        ray.shutdown()
