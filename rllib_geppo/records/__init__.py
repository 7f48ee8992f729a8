"""What a run leaves behind: the keys of its results, the same in every iteration, each
checkpoint's manifest, and the trial records that keep a study's results after its machine."""
