"""Where files go: atomic writes, the workdir (names, lock, remote copy), what a command may write, metrics writers."""
