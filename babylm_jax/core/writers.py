"""Where a run's numbers go: metrics.jsonl always, TensorBoard and Weights & Biases when asked.

    --config.train.writers='("jsonl", "tensorboard", "wandb")'

Every scalar of a metrics.jsonl record (loss, eval loss, learning rate, tokens/s, MFU, words
seen, `task/<name>`, ...) goes to each writer under the same name at the same step; the
resolved config goes to each as hyperparameters, budget.json and summary.json as the run
summary; the text samples of an eval go to TensorBoard's text tab and a W&B table. A resumed run continues the same TensorBoard folder (`<workdir>/tensorboard`, events
after the resumed step dropped as metrics.jsonl drops its records) and the same W&B run (its
id kept in `<workdir>/wandb_run.json`, steps W&B already holds not sent again); W&B's own files
go to `$WANDB_DIR/wandb` when it is set, else `<workdir>/wandb`. Only process 0 writes. A writer
whose package is missing, an online W&B run without credentials or a server that answers, or a
WANDB_MODE that W&B does not take or that train.wandb.mode overrides, is refused before any work.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import secrets
import threading
import time
from typing import Any, Mapping, Protocol, Sequence

from babylm_jax.core import rundir
from babylm_jax.core.atomic import atomic_write, atomic_write_json

WRITERS = ("jsonl", "tensorboard", "wandb")
EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # writer -> its package and setup.py extra
WANDB_MODES = ("online", "offline", "disabled")


class WandbSettings(Protocol):
    """`train.wandb.*` (config.training.WandbConfig)."""

    project: str
    entity: str
    name: str
    group: str
    tags: Sequence[str]
    mode: str


class LogDir(Protocol):
    """`train.tensorboard.*` (config.training.TensorBoardConfig)."""

    logdir: str


class WriterSettings(Protocol):
    """The `train.*` settings of the writers (config.training.TrainConfig has them)."""

    writers: Sequence[str]
    tensorboard: LogDir
    wandb: WandbSettings


def chosen_writers(names: Sequence[str]) -> tuple[str, ...]:
    """`train.writers` (names of WRITERS, checked by the schema, config.train) with their packages
    checked installed, "jsonl" first."""
    for name in names:
        if name in EXTRAS and importlib.util.find_spec(EXTRAS[name]) is None:
            raise ImportError(f"config key train.writers: {name!r} needs the {EXTRAS[name]} package; "
                              f"install it with: pip install -e \".[{EXTRAS[name]}]\"")
    return ("jsonl", *[n for n in dict.fromkeys(names) if n != "jsonl"])


# W&B's own WANDB_MODE values (wandb.Settings.mode); ours, train.wandb.mode, are WANDB_MODES.
WANDB_ENV_MODES = ("online", "offline", "shared", "disabled", "dryrun", "run")
_AS_OURS = {"dryrun": "offline", "run": "online", "shared": "online"}  # W&B's other names for our modes
WANDB_REACH_TIMEOUT_S = 5.0
_OFFLINE_HINT = "or log offline with --config.train.wandb.mode=offline and `wandb sync` later"


def check_wandb_ready(names: Sequence[str], mode: str) -> None:
    """For a run that logs to W&B (`train.writers` `names`, `train.wandb.mode`): ValueError, before any
    work, when the environment variable WANDB_MODE is not a W&B mode, and for an online run when W&B
    finds no API key or its server does not answer within WANDB_REACH_TIMEOUT_S (wandb.init would fail
    after the data is prepared, an unreachable server after minutes). At a terminal W&B asks for the key itself."""
    if "wandb" not in chosen_writers(names):
        return
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode is not None and env_mode not in WANDB_ENV_MODES:
        raise ValueError(f"environment variable WANDB_MODE={env_mode!r} is not a W&B mode (one of "
                         f"{', '.join(WANDB_ENV_MODES)}): unset it (config key train.wandb.mode chooses the mode) "
                         "or set it to one of them")
    if env_mode is not None and _AS_OURS.get(env_mode, env_mode) != mode:  # wandb.init(mode=...) would ignore it
        raise ValueError(f"environment variable WANDB_MODE={env_mode!r} differs from config key train.wandb.mode="
                         f"{mode!r}, which chooses the mode (W&B would not use WANDB_MODE): unset it, or set "
                         f"--config.train.wandb.mode={_AS_OURS.get(env_mode, env_mode)}")
    if mode != "online":
        return
    import wandb

    try:
        wandb.login(verify=False)
    except wandb.errors.UsageError:
        raise ValueError("config key train.wandb.mode='online' needs a W&B API key (run `wandb login` or set "
                         f"WANDB_API_KEY), {_OFFLINE_HINT}") from None
    base_url = os.environ.get("WANDB_BASE_URL") or wandb.Settings().base_url
    problem = wandb_server_problem(base_url, WANDB_REACH_TIMEOUT_S)
    if problem:
        raise ValueError(f"config key train.wandb.mode='online': the W&B server at {base_url} {problem}; check the "
                         f"network, WANDB_BASE_URL and the API key, {_OFFLINE_HINT}")


def wandb_server_problem(base_url: str, timeout_s: float) -> str | None:
    """Why the W&B server at `base_url` did not say who the API key belongs to within `timeout_s` (its
    retries and a name lookup included), in words; None when it did."""
    import wandb

    outcome: list[str | None] = []

    def ask() -> None:
        try:
            wandb.Api(timeout=timeout_s, overrides={"base_url": base_url}).viewer  # noqa: B018 - the request
            outcome.append(None)
        except Exception as error:  # noqa: BLE001 - W&B's and requests' errors alike: said in one line
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            outcome.append(f"did not answer as W&B does ({type(error).__name__}: {first})")

    thread = threading.Thread(target=ask, name=f"W&B at {base_url}", daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    return outcome[0] if outcome else f"did not answer within {timeout_s:g} s"


def scalars_of(record: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a metrics record, by name, without its step (strings and flags left out)."""
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as {"a.b.c": value}, values JSON scalars (sequences as their JSON text)."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_config(value, name + "."))
        elif isinstance(value, (list, tuple)):
            flat[name] = json.dumps(value, ensure_ascii=False)
        else:
            flat[name] = value
    return flat


class Writer(Protocol):
    def scalars(self, step: int, values: Mapping[str, float]) -> None: ...
    def curve(self, prefix: str, x_key: str, points: Sequence[Mapping[str, float]]) -> None: ...
    def summary(self, values: Mapping[str, Any], step: int = 0) -> None: ...
    def samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class TensorBoardWriter:
    """Event files in `logdir`. A run (re)starting at `trim_after` drops the events after that
    step first; `config` (a new run's) is written as hyperparameters and text."""

    def __init__(self, logdir: str, trim_after: int | None, config: Mapping[str, Any] | None):
        from tensorboard.plugins.hparams import summary_v2 as hparams
        from tensorboard.plugins.text import summary_v2 as text
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        os.makedirs(logdir, exist_ok=True)
        if trim_after is not None:
            trim_events(logdir, trim_after)
        self._text = text
        self._events = EventFileWriter(logdir)
        if config is not None:
            values = {k: v for k, v in flat_config(config).items() if isinstance(v, (bool, int, float, str))}
            self._add(hparams.hparams_pb(values, trial_id=os.path.basename(os.path.dirname(logdir))), 0)
            self._add(text.text_pb("config", _markdown_json(config)), 0)

    def _add(self, summary: Any, step: int) -> None:
        from tensorboard.compat.proto import event_pb2

        self._events.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        from tensorboard.compat.proto import summary_pb2

        self._add(summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=k, simple_value=v)
                                             for k, v in values.items()]), step)

    def curve(self, prefix: str, x_key: str, points: Sequence[Mapping[str, float]]) -> None:
        """`<prefix>/<name>` against `x_key` (TensorBoard's step axis) for every other name."""
        for point in points:
            self.scalars(int(point[x_key]), {f"{prefix}/{k}": v for k, v in point.items() if k != x_key})

    def summary(self, values: Mapping[str, Any], step: int = 0) -> None:
        for name, value in values.items():
            self._add(self._text.text_pb(name, _markdown_json(value)), step)

    def samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """The rows ({"prompt", "text"}) as one Markdown table under the tag "samples"."""
        lines = ["| prompt | text |", "| --- | --- |"]
        lines += [f"| {_cell(row['prompt'])} | {_cell(row['text'])} |" for row in rows]
        self._add(self._text.text_pb("samples", "\n".join(lines)), step)

    def flush(self) -> None:
        self._events.flush()

    def close(self) -> None:
        self._events.close()


def _cell(text: str) -> str:
    """Text as one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ") or " "


def _markdown_json(value: Any) -> str:
    """JSON as a Markdown code block (TensorBoard's text plugin renders Markdown)."""
    return "```\n" + json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n```"


def trim_events(logdir: str, last_step: int) -> None:
    """Rewrites each event file in `logdir` without the events of steps after `last_step`."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    for leftover in pathlib.Path(logdir).glob(".events.out.tfevents.*"):  # a rewrite that was interrupted
        leftover.unlink()
    for path in sorted(pathlib.Path(logdir).glob("events.out.tfevents.*")):
        records = list(RawEventFileLoader(str(path)).Load())
        kept = [r for r in records if event_pb2.Event.FromString(r).step <= last_step]
        if len(kept) < len(records):
            def write(temp: str, kept: list[bytes] = kept) -> None:
                with open(temp, "wb") as f:
                    writer = RecordWriter(f)
                    for record in kept:
                        writer.write(record)
            atomic_write(path, write)


class WandbWriter:
    """One W&B run per workdir; its id and the last step it holds live in `wandb_run.json`."""

    def __init__(self, workdir: str, settings: WandbSettings, config: Mapping[str, Any] | None):
        import wandb

        self._state_path = os.path.join(workdir, rundir.WANDB_RUN)
        state = _read_state(self._state_path) or {"id": secrets.token_hex(6), "step": -1, "keys": []}
        self._held_step, self._held_keys = state["step"], set(state["keys"])  # what W&B had when we started
        self._state = state
        self._run = wandb.init(
            project=settings.project, entity=settings.entity or None, name=settings.name or os.path.basename(workdir),
            group=settings.group or None, tags=list(settings.tags), mode=settings.mode, id=state["id"],
            resume="allow", dir=os.environ.get("WANDB_DIR") or workdir,
            config=None if config is None else flat_config(config),
        )
        atomic_write_json(self._state_path, state)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        if step < self._held_step or (step == self._held_step and set(values) <= self._held_keys):
            return  # logged before this run resumed: W&B holds it already
        self._run.log(dict(values), step=step)
        keys = set(values) | (set(self._state["keys"]) if step == self._state["step"] else set())
        self._state = {"id": self._state["id"], "step": step, "keys": sorted(keys)}
        atomic_write_json(self._state_path, self._state)

    def curve(self, prefix: str, x_key: str, points: Sequence[Mapping[str, float]]) -> None:
        """`<prefix>/<name>` charted against `<prefix>/<x_key>` (W&B steps only go forward)."""
        self._run.define_metric(f"{prefix}/*", step_metric=f"{prefix}/{x_key}")
        for point in points:
            self._run.log({f"{prefix}/{k}": v for k, v in point.items()})

    def summary(self, values: Mapping[str, Any], step: int = 0) -> None:
        self._run.summary.update(flat_config(values))

    def samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """The rows as a table "samples" (step, prompt, text) at `step`."""
        if step < self._held_step:
            return  # logged before this run resumed
        import wandb

        table = wandb.Table(columns=["step", "prompt", "text"], data=[[step, r["prompt"], r["text"]] for r in rows])
        self._run.log({"samples": table}, step=step)

    def flush(self) -> None:
        """W&B sends its records itself."""

    def close(self) -> None:
        self._run.finish()


def _read_state(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            state = json.load(f)
        except ValueError:
            raise ValueError(f"{path} is not valid JSON; delete it to start a new W&B run") from None
    if not (isinstance(state, dict) and isinstance(state.get("id"), str)):
        raise ValueError(f"{path} has no W&B run id; delete it to start a new W&B run")
    return {"id": state["id"], "step": int(state.get("step", -1)), "keys": list(state.get("keys", []))}


class RunWriters:
    """Sends each metrics record to metrics.jsonl (through `jsonl`) and to every other writer."""

    def __init__(self, jsonl: Any, others: Sequence[Writer]):
        self.jsonl, self.others = jsonl, list(others)
        self._sent: tuple[int, dict[str, float]] = (-1, {})  # the last step's values, sent once each

    def write(self, record: Mapping[str, Any]) -> None:
        self.jsonl.write(dict(record))
        step, sent = int(record["step"]), self._sent[1] if self._sent[0] == record["step"] else {}
        values = {k: v for k, v in scalars_of(record).items() if sent.get(k) != v}  # eval records repeat words_seen
        self._sent = (step, {**sent, **values})
        for writer in self.others:
            writer.scalars(step, values)

    def summary(self, values: Mapping[str, Any]) -> None:
        for writer in self.others:
            writer.summary(values)

    def samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """An eval's text samples ({"prompt", "text"}), to every writer but metrics.jsonl (samples.jsonl has them)."""
        for writer in self.others:
            writer.samples(step, rows)

    def flush(self) -> None:
        """Everything written so far onto disk (before a push to a remote workdir)."""
        for writer in self.others:
            writer.flush()

    def close(self) -> None:
        for writer in self.others:
            writer.close()
        self.others = []


def open_writers(jsonl: Any, workdir: str, train: WriterSettings, resolved: Mapping[str, Any],
                 start_step: int) -> RunWriters:
    """The writers `train.writers` names, opened for the run in `workdir` (none but jsonl's off process 0);
    `resolved` is the run's whole config as plain values, sent as hyperparameters."""
    names = chosen_writers(train.writers)
    if not jsonl.enabled:
        return RunWriters(jsonl, [])
    others: list[Writer] = []
    if "tensorboard" in names:
        logdir = train.tensorboard.logdir or os.path.join(workdir, rundir.TENSORBOARD)
        others.append(TensorBoardWriter(logdir, start_step, resolved if start_step == 0 else None))
    if "wandb" in names:
        others.append(WandbWriter(workdir, train.wandb, resolved))
    return RunWriters(jsonl, others)


def reopen_writers(workdir: str, train: WriterSettings) -> list[Writer]:
    """The TensorBoard folder and W&B run of a finished run, to add to (nothing is trimmed)."""
    names = chosen_writers(train.writers)
    found: list[Writer] = []
    if "tensorboard" in names:
        found.append(TensorBoardWriter(train.tensorboard.logdir or os.path.join(workdir, rundir.TENSORBOARD),
                                       None, None))
    if "wandb" in names:
        found.append(WandbWriter(workdir, train.wandb, None))
    return found
