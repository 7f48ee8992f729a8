"""``rllib train file`` (and ``rllib-geppo``): tuned-example YAML files run as one Ray Tune run.

| module | what |
| --- | --- |
| ``main`` | the command line: its arguments, the checks in order, `--dry-run`, the resume command, `report` |
| ``experiment_file`` | reading a YAML file: experiments, command-line overrides, `-e` selection, trials |
| ``validation`` | checking an experiment before Ray starts: config, stop criteria, checkpoints, spaces |
| ``config_schema`` | what an algorithm's config accepts: keys, kinds of value, value rules, env names |
| ``trainables`` | what Tune runs for `run:`, and the config dict handed to the algorithm |
| ``errors`` | ``UserError`` (bad input, exit code 2) and the "did you mean" hint of its messages |
| ``preflight`` | checks before anything waits: the cluster's address and token, the trials' resources |
| ``env_modules`` | env modules beside the YAML file and ``--import``, here and in every Ray worker |
| ``tune_run`` | the Tune run: one ``tune.run_experiments`` call in a Ray session |
| ``outcomes`` | what became of the trials: statuses, the summary, error lines, lost nodes, exit status |
| ``resume`` | a run's folder on ``--resume``: the saved run, options that would change it, the lock |
| ``checkpoints`` | finding the checkpoint a resume continues from |
| ``recorded`` | ``--skip-recorded``: the trials of a file that no finished trial record ran |
| ``result_files`` | each trial's ``result.json`` and ``progress.csv``, in its folder as results come |
| ``progress`` | the console's progress table and budget line |
| ``quiet`` | hiding known-harmless messages of Ray, RLlib and Tune (the console, validate(), C output) |
| ``interrupt`` | Ctrl+C and SIGTERM: a checkpoint per running trial, then the run stops |
| ``stranded`` | a warning for trials that wait for resources the cluster does not have |
"""
