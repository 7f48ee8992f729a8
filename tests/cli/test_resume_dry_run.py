"""`rllib train file ... --resume --dry-run`: what a resume would continue, read from the saved run
and its trial folders, writing nothing. In-process: no Ray starts."""

import functools
import json
from pathlib import Path

import pytest
import ray
import yaml

from rllib_geppo.cli.main import main
from rllib_geppo.cli.tune_run import _trial_name
from rllib_geppo.records.checkpoint_manifest import write_manifest

pytestmark = pytest.mark.usefixtures("no_ray")

STUDY = """
sweep:
  run: GePPO
  env: Pendulum-v1
  stop: {training_iteration: 3}
  config:
    seed: {grid_search: [0, 1, 2, 3]}
"""


def saved_trial(run_dir: Path, index: int, status: str) -> list[str]:
    """Tune's saved entry for trial `index` of experiment `sweep`, its folder made."""
    from ray.tune.experiment import Trial

    trial_id = f"abcde_{index:05d}"
    trial = Trial(
        "GePPO",
        stub=True,
        trial_id=trial_id,
        trial_name_creator=functools.partial(_trial_name, "sweep"),
        config={"seed": index},
    )
    trial.status, trial.stopping_criterion = status, {"training_iteration": 3}
    entry, metadata = trial.get_json_state()
    folder = f"sweep_{trial_id}_{index}_seed={index}_2026-01-01_00-00-00"
    (run_dir / folder).mkdir(parents=True)
    return [json.dumps({**json.loads(entry), "relative_logdir": folder}), metadata]


def rows(trial_dir: Path, iterations: int, done: bool) -> None:
    lines = [{"training_iteration": i, "done": done and i == iterations} for i in range(1, iterations + 1)]
    (trial_dir / "result.json").write_text("".join(json.dumps(r) + "\n" for r in lines))


def checkpoint(trial_dir: Path, iteration: int) -> Path:
    """A complete checkpoint of `iteration`, its manifest written last, as GePPO writes one."""
    folder = trial_dir / f"checkpoint_{iteration - 1:06d}"
    folder.mkdir()
    (folder / "algorithm_state.pkl").write_bytes(b"state")
    write_manifest(folder, training_iteration=iteration)
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_resume_dry_run_lists_each_trial_with_the_checkpoint_it_continues_from(tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    run_dir = tmp_path / "results" / "study"
    # Saved in Tune's arbitrary order: 0 finished; 1 running when the state was saved, and done
    # since (its newest checkpoint damaged by the kill: no resume reads it); 2 stopped with two
    # checkpoints; 3 never started; 4 failed after a checkpoint.
    entries = {
        i: saved_trial(run_dir, i, s)
        for i, s in ((2, "PAUSED"), (0, "TERMINATED"), (3, "PENDING"), (1, "RUNNING"), (4, "ERROR"))
    }
    folders = {i: json.loads(e[0])["relative_logdir"] for i, e in entries.items()}
    rows(run_dir / folders[0], 3, done=True)
    rows(run_dir / folders[1], 3, done=True)
    (checkpoint(run_dir / folders[1], 3) / "algorithm_state.pkl").write_bytes(b"cut")
    rows(run_dir / folders[2], 2, done=False)
    checkpoint(run_dir / folders[2], 1), checkpoint(run_dir / folders[2], 2)
    rows(run_dir / folders[4], 2, done=False)
    checkpoint(run_dir / folders[4], 1)
    state = run_dir / "experiment_state-2026-01-01_00-00-00.json"
    state.write_text(json.dumps({"trial_data": list(entries.values())}))
    before = files(run_dir)

    argv = ["train", "file", str(study), "--storage-path", str(tmp_path / "results"), "--resume", "--dry-run"]
    assert main(argv) == 0, capsys.readouterr().err
    assert not ray.is_initialized()
    out = capsys.readouterr().out
    plan = yaml.safe_load(out)
    assert plan["sweep"]["stop"] == {"training_iteration": 3}
    assert plan["sweep"]["trials"] == [  # in the order the run created them
        {"folder": folders[0], "status": "TERMINATED", "continues_from": None},
        {"folder": folders[1], "status": "TERMINATED", "continues_from": None},
        {"folder": folders[2], "status": "PAUSED", "continues_from": "checkpoint_000001"},
        {"folder": folders[3], "status": "PENDING", "continues_from": "start"},
        {"folder": folders[4], "status": "ERROR", "continues_from": "checkpoint_000000"},
    ]
    assert out.endswith(
        f"# --resume of {run_dir}: 3 of its 5 trial(s) continue (2 finished); dry run, nothing started.\n"
    )
    assert files(run_dir) == before  # a dry run writes nothing

    # The checks of a real resume come first: an option that would change the run exits 2.
    assert main([*argv, "-c", "lr=1e-3"]) == 2
    assert "these would change them: -c lr=1e-3" in capsys.readouterr().err
