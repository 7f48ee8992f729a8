"""``rllib train file`` (and ``rllib-geppo``): tuned-example YAML files run as one Ray Tune run.

| module | what |
| --- | --- |
| ``main`` | the command line: its arguments, the checks in order, `--dry-run`, the resume command, `report` |
| ``experiment_file`` | reading a YAML file: experiments, command-line overrides, `-e` selection, trials |
| ``validation`` | an experiment checked before Ray starts: config keys, kinds and rules, env names, stops |
| ``trainables`` | what Tune runs for `run:`, and the config dict handed to the algorithm |
| ``errors`` | ``UserError`` (bad input, exit code 2) and the "did you mean" hint of its messages |
| ``env_modules`` | env modules beside the YAML file and ``--import``, here and in every Ray worker |
| ``tune_run`` | the Ray session (the cluster's address checked first), one ``tune.run_experiments`` call |
| ``stranded`` | trials larger than the cluster: refused before they queue, named while they wait |
| ``outcomes`` | what became of the trials: statuses, the summary, error lines, lost nodes, exit status |
| ``resume`` | ``--resume``: the saved run, options that would change it, checkpoints; the run's lock |
| ``recorded`` | ``--skip-recorded``: the trials of a file that no finished trial record ran |
| ``result_files`` | each trial's ``result.json`` and ``progress.csv``, in its folder as results come |
| ``progress`` | the console's progress table and budget line |
| ``quiet`` | hiding known-harmless messages of Ray, RLlib and Tune (the console, validate(), C output) |
| ``interrupt`` | Ctrl+C and SIGTERM: a checkpoint per running trial, then the run stops |
"""
