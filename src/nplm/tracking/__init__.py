"""What a run leaves behind and shows: run records (metrics.json / metrics.csv), W&B and CSV loggers,
run folders and resume, progress lines, quiet third-party output, the HTML report."""
