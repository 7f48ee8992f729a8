"""Sampling on RLlib's new API stack: GePPO's EnvRunners and their connector pipelines, RLlib
episodes as trajectory segments, and the environment wrappers and checks they use."""
