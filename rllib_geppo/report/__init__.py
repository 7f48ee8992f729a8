"""``rllib-geppo report``: tables and figures from Ray Tune result folders.

| module | what |
| --- | --- |
| ``main`` | the command line: its arguments, and the exit code of a run |
| ``trials`` | one Tune trial folder read into a ``Trial``: its curves (a DataFrame), settings, variant |
| ``grouping`` | which trials form each row: labels by settings, ``--pool``, the budget to reach |
| ``build`` | the ``Report``: each table as a DataFrame, and the curves the figures draw |
| ``markdown`` | ``table.md`` (``DataFrame.to_markdown``), and how the tables write numbers |
| ``files`` | writing ``table.md``, the CSVs and the PNGs into ``--out`` |
| ``settings`` | which settings tell trials apart, and the labels that name them |
| ``stats`` | the arithmetic: curves aligned on one grid of env steps, averages, crossings, mean gains |
| ``plots`` | the figures (matplotlib) |
| ``paper`` | the paper's Table 1 beside ours |
| ``tables`` | reports' ``table.csv`` files joined: their rows relabelled, the mean gains across them |
"""
