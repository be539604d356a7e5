"""One option grammar and one error path for the commands train, prepare, evaluate and export.

Options are absl flags; a command with settings takes `--config FILE` (an ml_collections
config file, `get_config()`) and `--config.a.b=v` overrides of any key in it. A user error
(a bad option, an unknown config key, a missing or damaged file, an impossible setting)
prints one line to stderr, `<command>: error: <what is wrong and how to fix it>`, and exits
with status 2, without a traceback (BABYLM_TRACEBACK=1 shows one). A command stopped by SIGTERM,
SIGINT or SIGHUP (`core.stops.STOP_SIGNALS`) before its work finished prints one line saying what it
kept and exits with status 128 + the signal's number (143, 130, 129), so that `train && evaluate` stops there.

    COMMAND = cli.Command("export", __doc__)
    _OUTPUT = flags.DEFINE_string("output", None, "export directory", flag_values=COMMAND.flags)

    def main(argv):  # argv: program name first
        COMMAND.parse(argv)
        ...

    if __name__ == "__main__":
        COMMAND.run(main)

Each command keeps its flags in a FlagValues of its own, so commands (and tests) can share a
process and parse again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import re
import signal
import sys
from typing import Any, Callable, Iterator, NoReturn, Sequence

import ml_collections
import tqdm
from absl import flags, logging
from ml_collections import config_flags

from babylm_jax.config.files import ConfigFileError, load_config_file
from babylm_jax.core import platforms
from babylm_jax.core.stops import STOP_SIGNALS, Stopped, say_stopped, stop_behind, stop_on_signals

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input a user can fix; the message names the file (and line), key or option, and the fix."""


# Exceptions that carry a message written for the user: bad values (ValueError, including
# JSON decoding errors), missing or unreadable files (OSError) and missing extras (ImportError).
USER_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, OSError, ImportError)


def one_line(message: str) -> str:
    """The message on one line; of an embedded traceback only its first and last lines."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if any(line.startswith("Traceback") for line in lines):
        lines = [lines[0], lines[-1]]
    return " ".join(lines)


def fail(command: str, message: str) -> NoReturn:
    """Prints `<command>: error: <message>` on one line and exits with status 2."""
    close_progress_bars()
    print(f"{command}: error: {one_line(message)}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USER_ERROR)


def close_progress_bars() -> None:
    """Closes the progress bars an error or a stop left open, so that its line starts a line of its own."""
    for bar in list(getattr(tqdm.tqdm, "_instances", ())):
        bar.close()


def report_errors(command: str, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)`, with any user error turned into one line and exit status 2, and a
    stop by one of STOP_SIGNALS into one line and exit status 128 + the signal's number (143, 130, 129)."""
    try:
        return function(*args)
    except USER_ERRORS as error:
        stopped = stop_behind(error)
        if stopped is not None:  # a library wrapped the stop in an error of its own (jax's pytree equality)
            close_progress_bars()
            say_stopped(f"{command}: {stopped}")
            sys.exit(stopped.exit_status)
        if os.environ.get("BABYLM_TRACEBACK"):
            raise
        fail(command, str(error) or type(error).__name__)
    except (RuntimeError, AssertionError) as error:
        # a JAX_PLATFORMS naming a backend this host cannot start, or a config too big for the device
        line = platforms.backend_error(error) or platforms.out_of_memory(error)
        if line is None or os.environ.get("BABYLM_TRACEBACK"):
            raise
        fail(command, line)
    except Stopped as stopped:
        close_progress_bars()
        say_stopped(f"{command}: {stopped}")
        sys.exit(stopped.exit_status)


@contextlib.contextmanager
def _quiet_config_flags() -> Iterator[None]:
    """Without config_flags' warning on a get_config() that returned None: the error line says so, once."""
    logger = logging.get_absl_logger()
    quiet = lambda record: "get_config() returned None" not in record.getMessage()  # noqa: E731
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _syntax_message(error: SyntaxError) -> str:
    return f"{error.filename}:{error.lineno}: {error.msg} (in the config file)"


class Command:
    """The flags of one command and its entry point."""

    def __init__(self, name: str, usage: str, on_stop: str = "nothing half-written is kept; run the same command "
                 "to start again") -> None:
        self.name, self.usage, self.on_stop = name, usage, on_stop
        self.flags = flags.FlagValues()
        self.config_files: dict[str, str | None] = {}  # config flag name -> its default file

    def config(self, name: str = "config", default: str | None = None, help_string: str = "") -> flags.FlagHolder:
        """A `--name FILE` config flag; `--name.a.b=v` overrides only keys the file has."""
        self.config_files[name] = default
        # The default goes into argv at parse time (`_with_default_configs`): a default given to
        # config_flags would be loaded, with sys.argv's overrides, when this module is imported.
        holder = config_flags.DEFINE_config_file(name, None, help_string or "ml_collections config file",
                                                 flag_values=self.flags, lock_config=True)
        self.flags[name].default_as_str = repr(default) if default else None  # what --help shows
        return holder

    def run(self, main: Callable[[list[str]], Any]) -> None:
        """The entry point: `main(sys.argv)` under the shared error and stop paths."""
        logging.use_absl_handler()
        stop_on_signals(self.on_stop)
        try:
            report_errors(self.name, platforms.check_xla_flags)  # before JAX reads them, fatally
            report_errors(self.name, main, list(sys.argv))
        finally:  # the work is over, done, failed or stopped, and said: the exit status stands
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)

    def parse(self, argv: Sequence[str]) -> list[str]:
        """Parses `argv` (program name first); UserError names the bad option or key.

        `--help` prints the flags and exits. Parsing again forgets earlier values and overrides.
        """
        if any(arg in ("-h", "--help", "--helpfull", "-help") for arg in argv[1:]):
            print(f"{self.usage}\n\n{self.flags.get_help()}")
            sys.exit(0)
        argv = self._with_default_configs(list(argv))
        saved_argv = sys.argv
        sys.argv = argv  # config_flags finds `--config.x=v` overrides in sys.argv
        try:
            self._check_config_files(argv)
            self.flags.unparse_flags()
            for name in [n for n in self.flags if "." in n]:  # override flags of an earlier parse
                delattr(self.flags, name)
            with _quiet_config_flags():
                rest = self.flags(argv)
            for name in self.config_files:  # config_flags defers a config file's load error to here
                value = self.flags[name].value
                getattr(value, "keys", None)
                given = value is not None or self._config_path(name, argv) is not None
                if given and not isinstance(value, ml_collections.ConfigDict):
                    raise TypeError(f"--{name}: no ConfigDict")  # _config_file_error says which file and why
        except Exception as error:  # noqa: BLE001 - all of it comes from the options and the config file
            raise UserError(self._flag_error_message(error, argv)) from None
        finally:
            sys.argv = saved_argv
        if len(rest) > 1:
            raise UserError(f"unexpected argument(s) {' '.join(rest[1:])}: every option is a --flag=value")
        return rest

    def _config_path(self, name: str, argv: Sequence[str]) -> str | None:
        """The file given last for config flag `name` (`--name=F` or `--name F`), else its default."""
        path = self.config_files.get(name)
        for i, arg in enumerate(argv):
            match = re.match(rf"^--?{re.escape(name)}(=(.*))?$", arg)
            if match:
                path = match.group(2) if match.group(1) else (argv[i + 1] if i + 1 < len(argv) else None)
        return path

    def _with_default_configs(self, argv: list[str]) -> list[str]:
        """argv with `--name=<default>` for config flags not given (their overrides need it explicit)."""
        for name, default in self.config_files.items():
            if default is not None and not any(re.match(rf"^--?{re.escape(name)}(=|$)", arg) for arg in argv):
                argv = [argv[0], f"--{name}={default}", *argv[1:]]
        return argv

    def _check_config_files(self, argv: Sequence[str]) -> None:
        for name in self.config_files:
            path = self._config_path(name, argv)
            if path is not None and not os.path.isfile(path.split(":", 1)[0]) and os.path.isfile(path):
                raise UserError(f"--{name}={path}: a ':' in a config file's path starts get_config's argument "
                                "(file.py:arg); give a path without ':' (a link to the file)")
            if path is not None and not os.path.isfile(path.split(":", 1)[0]):
                raise UserError(f"--{name}={path}: config file not found (give the path of an ml_collections "
                                "config file, e.g. configs/base.py or configs/eval.py)")

    def _flag_error_message(self, error: BaseException, argv: Sequence[str]) -> str:
        if isinstance(error, UserError):
            return str(error)
        if isinstance(error, SyntaxError):
            return _syntax_message(error)
        broken = self._config_file_error(argv)
        if broken:
            return broken
        if isinstance(error, (KeyError, AttributeError)):
            unknown = self._unknown_override(argv)
            if unknown:
                return unknown
        message = one_line(str(error))
        required = re.search(r"Flag --(\S+) must have a value other than None", message)
        if required:
            return f"--{required.group(1)} is required (see --help)"
        return message.replace("Configuration is not available because of an earlier failure to load: ", "")

    def _load(self, name: str, argv: Sequence[str]) -> Any:
        """The config of config flag `name` as given in `argv`, loaded as config_flags loads it."""
        path, _, arg = (self._config_path(name, argv) or "").partition(":")
        return load_config_file(path, arg or None)

    def _config_file_error(self, argv: Sequence[str]) -> str | None:
        """The error of the first given config file that fails to load, naming its line, or None."""
        for name in self.config_files:
            if self._config_path(name, argv) is None:
                continue
            try:
                self._load(name, argv)
            except SyntaxError as error:
                return _syntax_message(error)
            except ConfigFileError as error:
                return f"{error} (in the --{name} file)"
        return None

    def _unknown_override(self, argv: Sequence[str]) -> str | None:
        """A message naming the first `--config.KEY` override whose KEY the config file lacks."""
        for name in self.config_files:
            path = self._config_path(name, argv)
            config = self._load(name, argv)  # loads: _config_file_error found no error in it
            for arg in argv:
                match = re.match(rf"^--?(?:no)?{re.escape(name)}\.([^=]+)", arg)
                if match and not _has_key(config, match.group(1)):
                    return f"--{name}.{match.group(1)}: {path} has no config key {match.group(1)}" + (
                        _did_you_mean(config, match.group(1)) or " (only the keys of that file can be set)")
        return None


def _has_key(config: Any, key: str) -> bool:
    for part in key.split("."):
        if not hasattr(config, "keys") or part not in config.keys():
            return False
        config = config[part]
    return True


def _did_you_mean(config: Any, key: str) -> str:
    """"; did you mean a.b_c?" for the closest sibling of the unknown leaf of `key`, if one is close."""
    *parents, leaf = key.split(".")
    for part in parents:
        if not _has_key(config, part):
            return ""
        config = config[part]
    close = difflib.get_close_matches(leaf, sorted(config.keys()), n=1, cutoff=0.7)
    return f"; did you mean {'.'.join([*parents, close[0]])}?" if close else ""


@dataclasses.dataclass(frozen=True)
class CheckpointFlags:
    """`--workdir`, `--step` and `--use_ema`: which trained model a command (evaluate, export) loads."""

    workdir: flags.FlagHolder
    step: flags.FlagHolder
    use_ema: flags.FlagHolder

    @classmethod
    def define(cls, command: Command, what: str) -> "CheckpointFlags":
        """The three flags on `command`; `what` it does with the params ("Score", "Export")."""
        return cls(
            flags.DEFINE_string("workdir", None, "Training run directory (checkpoints + tokenizer).",
                                flag_values=command.flags, required=True),
            flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).", flag_values=command.flags),
            flags.DEFINE_enum("use_ema", "auto", ["auto", "yes", "no"],
                              f"{what} EMA params ('auto': when the run kept them).", flag_values=command.flags),
        )

    def ema(self) -> bool | None:
        """--use_ema as load_for_eval takes it: None (auto), True or False."""
        return {"auto": None, "yes": True, "no": False}[self.use_ema.value]


def load_config(path: str, overrides: Sequence[str] = ()) -> Any:
    """Config file `path` with `--config.a.b=v` overrides, parsed exactly as the commands parse them
    (for scripts that take several config files); UserError names a bad override."""
    command = Command("config", "")
    holder = command.config("config")
    command.parse(["config", f"--config={path}", *overrides])
    return holder.value
