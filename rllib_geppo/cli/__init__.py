"""``rllib train file`` (and ``rllib-geppo``): tuned-example YAML files run as one Ray Tune run.

| module | what |
| --- | --- |
| ``main`` | the command line: parse, check, run, resume, report the outcome |
| ``experiment_file`` | reading and checking a YAML file into Tune experiments |
| ``preflight`` | checks before Ray starts: resources, the cluster address, the storage path |
| ``checkpoints`` | finding the checkpoint a resume continues from |
| ``progress`` | the console's progress table and budget line |
| ``quiet`` | hiding known-harmless messages of Ray, RLlib and Tune |
"""
