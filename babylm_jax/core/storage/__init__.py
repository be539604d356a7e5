"""Where files go: atomic writes, the workdir's names and lock, remote workdirs, where a command may write, metrics writers."""
