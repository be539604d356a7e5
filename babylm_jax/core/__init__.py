"""The floor every room stands on: storage/ (files, workdirs), reading/, registries/ (families, backends), host/."""
