"""``rllib train file`` (and ``rllib-geppo``): tuned-example YAML files run as one Ray Tune run.

| module | what |
| --- | --- |
| ``main`` | the command line: its arguments, the checks in order, `--dry-run`, the resume command, `report` |
| ``experiment_file`` | a YAML file: experiments, overrides, `-e`, trials, what Tune runs; ``UserError`` |
| ``validation`` | an experiment checked before Ray starts: config keys, kinds and rules, env names, stops |
| ``env_modules`` | env modules beside the YAML file and ``--import``, here and in every Ray worker |
| ``tune_run`` | the Ray session (its address checked first), ``tune.run_experiments``, result files |
| ``stranded`` | trials larger than the cluster: refused before they queue, named while they wait |
| ``outcomes`` | how a run ends: Ctrl+C and SIGTERM, statuses, the summary, lost nodes, exit status |
| ``resume`` | ``--resume``: the saved run, options that would change it, checkpoints; the run's lock |
| ``recorded`` | ``--skip-recorded``: the trials of a file that no finished trial record ran |
| ``console`` | known-harmless messages of Ray, RLlib and Tune hidden; the progress table and budget line |
"""
