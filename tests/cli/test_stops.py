"""`rllib train file` stopped and resumed: a run killed with SIGKILL (Tune's saved state behind
the checkpoints) and one stopped with SIGTERM (a checkpoint, a summary and the resume command),
each resumed; the first run is shown with -v (RLlib's messages too). Real runs of the console
script in subprocesses, each with its own local Ray."""

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rllib_geppo.cli.main import main
from rllib_geppo.records import result_schema
from rllib_geppo.records.checkpoint_manifest import damaged_files, read_manifest

from helpers import wait_until

RLLIB = Path(sys.executable).with_name("rllib")  # the console script installed with the package

# Two trials side by side (one CPU each): "short" finishes while "long" trains on. Tiny
# CartPole iterations, a checkpoint after each.
RUN = """
short:
  run: GePPO
  env: CartPole-v1
  stop: {training_iteration: 3}
  checkpoint_config: {checkpoint_frequency: 1}
  config: &config
    train_batch_size_per_learner: 64
    num_epochs: 1
    num_minibatches: 2
    num_env_runners: 0
    num_envs_per_env_runner: 1
long:
  run: GePPO
  env: CartPole-v1
  stop: {training_iteration: 1000}
  checkpoint_config: {checkpoint_frequency: 1}
  config: *config
"""


def start(argv: list, out: Path, **env: str) -> subprocess.Popen:
    """The console script in its own process group (as a shell starts a job)."""
    return subprocess.Popen(
        [str(RLLIB), *map(str, argv)],
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **env},
    )


def kill_everything(proc: subprocess.Popen) -> None:
    """SIGKILL to the command and every process below it (its Ray: raylet, workers, trials), as
    a crash of the machine would end them; returns once none runs."""
    tree, parents = {proc.pid}, _parents()
    while grown := {pid for pid, parent in parents.items() if parent in tree} - tree:
        tree |= grown
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    while any(_running(pid) for pid in tree):
        time.sleep(0.1)


def _parents() -> dict[int, int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    return parents


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def trial_dir(run_dir: Path, experiment: str) -> Path:
    (folder,) = run_dir.glob(f"{experiment}_*")
    return folder


def checkpoints(folder: Path) -> list[Path]:
    """The trial's complete checkpoints (a manifest is written last), oldest first."""
    return sorted(c for c in folder.glob("checkpoint_*") if read_manifest(c) is not None)


def snapshot(folder: Path) -> dict:
    """Every file under the trial's checkpoints: its SHA-256 and modification time."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.glob("checkpoint_*/**/*"))
        if p.is_file()
    }


def iterations(folder: Path) -> tuple[list[int], list[int]]:
    """The iteration of each row of the trial's result.json and progress.csv."""
    results = [
        json.loads(line)["training_iteration"] for line in (folder / "result.json").read_text().splitlines()
    ]
    with (folder / "progress.csv").open(newline="") as f:
        rows = [int(float(row["training_iteration"])) for row in csv.DictReader(f)]
    return results, rows


def summary(out: str) -> dict[str, str]:
    """Experiment -> status, from the summary lines of a run's output."""
    lines = out.split("\nSummary:\n")[1].splitlines()
    return {
        line.split("_")[0].strip(): line.split(": ")[1].split(",")[0]
        for line in lines
        if line.startswith("  ") and ": " in line
    }


def done(folder: Path) -> bool:
    lines = (folder / "result.json").read_text().splitlines() if (folder / "result.json").exists() else []
    return bool(lines) and json.loads(lines[-1]).get("done", False)


def test_a_killed_run_resumes_from_its_newest_checkpoints_and_sigterm_saves_one(tmp_path, capsys):
    (tmp_path / "stops.yaml").write_text(RUN)
    argv = ["train", "file", tmp_path / "stops.yaml", "--storage-path", tmp_path / "r"]
    run_dir = tmp_path / "r" / "stops"
    # Tune saves the run's state when it starts and then only every hour: after the SIGKILL it
    # holds both trials unfinished and without a checkpoint, as it can after any SIGKILL that
    # comes between two of its saves (seconds apart by default).
    lagging = {"TUNE_GLOBAL_CHECKPOINT_S": "3600"}
    run = start([*argv, "-v"], tmp_path / "1.out", **lagging)
    try:
        wait_until(
            lambda: (
                run_dir.exists()
                and len(list(run_dir.glob("long_*/checkpoint_000004"))) == 1
                and done(trial_dir(run_dir, "short"))
            ),
            run,
            "a finished short trial and 5 long iterations",
        )
        kill_everything(run)
    finally:
        run.kill()
        run.wait()
    assert "on the new API stack!" in (tmp_path / "1.out").read_text()  # -v: RLlib's known-harmless messages
    short, long = trial_dir(run_dir, "short"), trial_dir(run_dir, "long")
    short_files = {p: p.read_bytes() for p in short.rglob("*") if p.is_file()}
    # Tune copies each checkpoint into the trial's folder file by file: a SIGKILL in the middle
    # of a copy leaves the newest damaged, and --resume then asks for --skip-damaged-checkpoints.
    intact = [c for c in checkpoints(long) if not damaged_files(c, read_manifest(c))]
    killed, newest = snapshot(long), intact[-1]
    assert iterations(short) == ([1, 2, 3], [1, 2, 3])

    # Options that would change the run are refused, each named, before Ray starts.
    assert (
        main(
            [
                *map(str, argv),
                "--resume",
                "-c",
                "train_batch_size_per_learner=512",
                "-c",
                "num_epochs=1",
                "--stop",
                "training_iteration=10",
            ]
        )
        == 2
    )
    assert (
        "these would change them: -c train_batch_size_per_learner=512, --stop "
        "training_iteration=10. Leave them out to resume" in capsys.readouterr().err
    )  # num_epochs is as it was

    # --resume: "short" stays finished; "long" continues from its newest checkpoint. SIGTERM
    # then stops it at the end of an iteration, with a checkpoint of it.
    run = start([*argv, "--resume", "--skip-damaged-checkpoints"], tmp_path / "2.out", **lagging)
    try:
        old = {name.split("/")[0] for name in killed}
        wait_until(
            lambda: any(c.name not in old for c in checkpoints(long)),
            run,
            "a checkpoint of the resumed trial",
        )
        run.send_signal(signal.SIGTERM)  # to the command only, as kill, timeout or docker stop send it
        assert run.wait(timeout=300) == 143
    finally:
        run.kill()
    out = (tmp_path / "2.out").read_text()
    assert summary(out) == {"short": "TERMINATED", "long": "INTERRUPTED"}
    command = out.split("Stopped by SIGTERM. Continue with: ")[1].splitlines()[0]
    assert (
        command
        == f"rllib train file {tmp_path / 'stops.yaml'} --storage-path {tmp_path / 'r'} --name stops --resume"
    )
    assert "Traceback" not in out and "SIGTERM received" not in out  # no stack dumps
    assert "Resume experiment with" not in out  # Tune's resume line: one resume command only
    assert f"resuming from {newest.name} (iteration {read_manifest(newest)['training_iteration']})" in out
    results, rows = iterations(long)
    assert results == rows == list(range(1, results[-1] + 1)) and results[-1] > 5  # each once
    with (long / "progress.csv").open(newline="") as f:
        header, *cells = list(csv.reader(f))
    assert all(len(row) == len(header) for row in cells)  # the columns stay aligned
    first, last = (
        json.loads(line) for line in (long / "result.json").read_text().splitlines()[:: len(results) - 1]
    )
    assert list(result_schema.leaf_paths(first)) == list(result_schema.leaf_paths(last))
    assert read_manifest(checkpoints(long)[-1])["training_iteration"] == results[-1]  # none lost
    now = snapshot(long)
    assert {name: now[name] for name in killed} == killed  # no checkpoint overwritten
    assert {p: p.read_bytes() for p in short.rglob("*") if p.is_file()} == short_files
