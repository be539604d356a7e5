"""Loading ml_collections config files by path (configs/ is a folder of files, not a package)."""
from __future__ import annotations

import importlib.util
import os
import sys
import traceback

import ml_collections


class ConfigFileError(ValueError):
    """A config file that raised when imported or in get_config(); the message names the file and line."""


def _located(error: Exception, path: str | os.PathLike) -> str:
    """`path:line: Type: message` at the last line of `path` in the error's traceback."""
    here = os.path.realpath(path)
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
             if os.path.realpath(frame.filename) == here]
    where = f"{path}:{lines[-1]}" if lines else str(path)
    message = " ".join(str(error).split())
    return f"{where}: {type(error).__name__}{': ' + message if message else ''}"


def load_config_file(path: str | os.PathLike, arg: str | None = None) -> ml_collections.ConfigDict:
    """`get_config()` (`get_config(arg)` with an arg, as in `--config=path.py:arg`) of the config file at
    `path`; ConfigFileError names the file and line where importing it or get_config() raised, or the
    file whose get_config() returned no ConfigDict (None: a missing `return`)."""
    spec = importlib.util.spec_from_file_location(f"babylm_config_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path}: not a Python config file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as importing does: dataclasses (config/evaluation.py's) look their module up
    try:
        spec.loader.exec_module(module)
        if not callable(getattr(module, "get_config", None)):
            raise ConfigFileError(f"{path}: defines no get_config() (a config file returns its ConfigDict from it)")
        config = module.get_config() if arg is None else module.get_config(arg)
    except (SyntaxError, ConfigFileError):  # a SyntaxError names its line; a config file it loads names its own
        raise
    except Exception as error:  # noqa: BLE001 - the config file's own code: say where it failed
        raise ConfigFileError(_located(error, path)) from error
    if not isinstance(config, ml_collections.ConfigDict):
        fix = "does it end with `return config`?" if config is None else "return ml_collections.ConfigDict(...)"
        raise ConfigFileError(f"{path}: get_config() returned {type(config).__name__ if config is not None else None}, "
                              f"not an ml_collections.ConfigDict ({fix})")
    return config
