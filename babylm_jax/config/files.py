"""Loading ml_collections config files by path (configs/ is a folder of files, not a package)."""
from __future__ import annotations

import importlib.util
import os

import ml_collections


def load_config_file(path: str | os.PathLike) -> ml_collections.ConfigDict:
    """`get_config()` of the config file at `path`."""
    spec = importlib.util.spec_from_file_location(f"babylm_config_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path}: not a Python config file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()
