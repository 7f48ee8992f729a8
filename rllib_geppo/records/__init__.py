"""What a run leaves behind: the keys of its results, the same in every iteration, and each
checkpoint's manifest."""
