"""``rllib-geppo report``: tables and figures from Ray Tune result folders.

| module | what |
| --- | --- |
| ``main`` | reading trial folders, grouping them, writing ``table.md``, CSVs and PNGs |
| ``stats`` | the arithmetic: curves aligned on env steps, means and standard errors |
| ``plots`` | the drawing (matplotlib) |
| ``paper`` | the paper's Table 1 beside ours |
"""
