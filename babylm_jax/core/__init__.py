"""The floor every room stands on: files and workdirs (atomic writes, outputs, remote workdirs),
reading JSON and text, the family and attention-backend tables, special ids, the host (platforms,
worker processes, progress, how a command stops on SIGTERM, SIGINT and SIGHUP)."""
