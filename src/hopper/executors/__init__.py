"""Where a job's process runs when it is not a local child of its supervisor."""
