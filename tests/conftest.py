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

``make test`` runs the suite on two pytest-xdist workers, a module at a time each (``--dist
loadfile``), each worker with its own local Ray: half of a test's time is spent waiting on other
processes (Ray actors starting, a command run in a subprocess), which the other worker fills.
The rooms whose modules take longest are collected first, so that neither worker is left with a
long module at the end (:data:`SLOW_FIRST`).
"""

import os

import pytest
import ray

#: The shared Ray's logical CPUs (see the module docstring).
RAY_CPUS = max(8, os.cpu_count() or 1)
#: Test folders by the time their modules take, longest first, except that the two whose modules
#: mostly start Ray themselves (``no_ray``) come together, so that each worker starts its local
#: Ray again as seldom as it can; the rest follow in their order.
SLOW_FIRST = ("cli", "baselines", "algorithm", "rl_module", "learner", "old_stack", "sampling", "deployment")


def pytest_collection_modifyitems(session, config, items) -> None:
    def rank(item) -> int:
        folder = item.path.parent.name
        return SLOW_FIRST.index(folder) if folder in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: each module keeps its tests' order


@pytest.fixture(scope="module")
def local_ray() -> None:
    """The session's local Ray, started if it is not running."""
    if not ray.is_initialized():
        # No idle workers started ahead: every process a test needs is an actor of its own.
        ray.init(
            address="local",
            num_cpus=RAY_CPUS,
            include_dashboard=False,
            log_to_driver=False,
            _system_config={"prestart_worker_first_driver": False},
        )


@pytest.fixture(scope="module")
def no_ray() -> None:
    """No Ray in this process: for tests whose code starts and stops its own."""
    if ray.is_initialized():
        ray.shutdown()


def pytest_sessionfinish(session, exitstatus) -> None:
    if ray.is_initialized():
        ray.shutdown()
