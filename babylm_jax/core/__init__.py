"""The floor every room stands on: storage/ (files and workdirs), reading/, registries/ (families, attention backends), host/."""
