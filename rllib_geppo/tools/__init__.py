"""User tools: ``rllib train file`` (``cli``, ``experiment_file``) and ``rllib-geppo report``
(``report``, ``report_stats``, ``report_plots``)."""
