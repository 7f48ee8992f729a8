"""Baselines that run beside GePPO in ``rllib train file`` and ``rllib-geppo report``:
``SB3PPO``, Stable-Baselines3's PPO (optional extra ``[baselines]``)."""
