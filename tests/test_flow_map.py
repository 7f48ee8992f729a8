"""docs/internals.md's flow map stays true: a real iteration with the defaults calls its
functions in its order, and a newcomer follows it in at most 15 files and 8 moves between
rooms."""

import re
import sys
from pathlib import Path

import pytest

import rllib_geppo
from rllib_geppo import GePPOConfig

from helpers import DOCS

PACKAGE = Path(rllib_geppo.__file__).parent


def flow_map() -> list[tuple[str, str, str]]:
    """The map's rows: (file under the package, function's qualified name, room)."""
    text = (DOCS / "internals.md").read_text()
    table = text.split("<!-- flow map -->")[1].split("<!-- end flow map -->")[0]
    return [
        (path, function, room)
        for path, function, room in re.findall(
            r"^\| \d+ \| [^|]+ \| `([^`:]+):([^`]+)` \| (\w+) \|", table, re.M
        )
    ]


def test_the_map_is_short_enough_to_follow():
    rows = flow_map()
    assert len(rows) >= 10
    assert len({path for path, _, _ in rows}) <= 15
    rooms = [room for _, _, room in rows]
    assert sum(a != b for a, b in zip(rooms, rooms[1:])) <= 8
    for path, _, room in rows:
        assert path.split("/")[0] == room  # the room is the file's folder


def test_a_real_iteration_calls_the_map_s_functions_in_its_order(local_ray):
    calls: list[tuple[str, str]] = []

    def record(frame, event, arg) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            path = Path(frame.f_code.co_filename).relative_to(PACKAGE).as_posix()
            calls.append((path, frame.f_code.co_qualname))

    # The defaults, sampling in the driver so that one thread runs every step.
    algo = (
        GePPOConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=256, num_minibatches=4, num_epochs=1)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        sys.setprofile(record)
        try:
            result = algo.train()
        finally:
            sys.setprofile(None)
    finally:
        algo.stop()
    assert result["learners"]["default_policy"]["step_path"] == "hand_eager"  # "auto": eager at first
    position = 0
    for path, function, _ in flow_map():
        try:
            position = calls.index((path, function), position) + 1
        except ValueError:
            pytest.fail(f"the iteration did not call {path}:{function} after the map's previous step")
