"""``rllib-geppo report``: tables and figures from Ray Tune result folders.

| module | what |
| --- | --- |
| ``main`` | the command line: its arguments, the files it writes, its exit code |
| ``trials`` | one Tune trial folder read into a ``Trial``: its curves (a DataFrame), settings, variant |
| ``grouping`` | which trials form each row: labels by settings, ``--pool``, the budget to reach |
| ``build`` | the ``Report``: each table as a DataFrame, the curves the figures draw; the paper's Table 1 |
| ``markdown`` | ``table.md`` (``DataFrame.to_markdown``), and how the tables write numbers |
| ``stats`` | the arithmetic: curves aligned on one grid of env steps, averages, crossings, mean gains |
| ``plots`` | the figures (matplotlib) |
"""
