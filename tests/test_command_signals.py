"""Every command ends on SIGTERM, SIGINT or SIGHUP with one line saying what is kept (issue 27) and exit
status 128 + the signal's number (issue 35): 143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP, so that
`train && evaluate` stops there. An evaluate stopped in a task keeps the tasks it finished."""
import importlib.util
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import tiny_config
from fixtures.data import synthetic
from fixtures.run import make_run

from babylm_jax.config import cli
from babylm_jax.core.stops import Stopped

pytestmark = pytest.mark.slow  # every test runs a command in a subprocess and signals it


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_stop_is_one_line_and_its_exit_status(capsys, signum, status):
    def stopped():
        raise Stopped(signum, f"stopped by {signal.Signals(signum).name}; nothing half-written is kept")

    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("evaluate", stopped)
    assert exit_info.value.code == status
    assert capsys.readouterr().out == f"evaluate: stopped by {signal.Signals(signum).name}; nothing half-written is kept\n"


def test_a_hang_up_whose_terminal_is_gone_keeps_its_exit_status(monkeypatch):
    """After a closed terminal's SIGHUP the stop's line cannot be written (EIO): the exit status stands."""
    class GoneTerminal:
        def write(self, text):
            raise OSError(5, "Input/output error")

        def flush(self):
            raise OSError(5, "Input/output error")

    def stopped():
        raise Stopped(signal.SIGHUP, "stopped by SIGHUP after step 6; ...")

    monkeypatch.setattr(sys, "stdout", GoneTerminal())
    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("train", stopped)
    assert exit_info.value.code == 129 and sys.stdout.name == os.devnull
    sys.stdout.close()


def test_sigterm_during_prepare_is_one_line_and_the_same_command_goes_on(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "docs.txt").write_text("\n\n".join(synthetic.svo_documents(20000)) + "\n", encoding="utf-8")
    config_file = tmp_path / "config.py"
    config_file.write_text("import ml_collections\n\n\ndef get_config():\n    return ml_collections.ConfigDict(%r)\n"
                           % json.loads(tiny_config(corpus).to_json()))
    command = [sys.executable, "-m", "babylm_jax.prepare", f"--config={config_file}", f"--workdir={tmp_path / 'run'}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.set_blocking(process.stderr.fileno(), False)
    seen = b""
    while b"count words" not in seen and process.poll() is None:  # the corpus pass has started
        time.sleep(0.05)
        try:
            seen += os.read(process.stderr.fileno(), 1 << 16)
        except BlockingIOError:
            pass
    process.send_signal(signal.SIGTERM)
    out, err = (part.decode() for part in process.communicate(timeout=120))
    seen = seen.decode(errors="replace")
    assert process.returncode == 143, err
    assert "Traceback" not in seen + err
    assert out.splitlines()[-1] == ("prepare: stopped by SIGTERM; the shards counted and tokenised so far are kept; "
                                    "run the same command to go on from them")
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert "token cache:" in finished.stdout


FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def _signal_evaluate(tmp_path, signal_name, at_runner, output):
    run, data = tmp_path / "run", tmp_path / "data"
    if not run.exists():
        make_run(run)
        shutil.copytree(FIXTURES / "minimal_pairs" / "zhoblimp", data / "zhoblimp")
        shutil.copytree(FIXTURES / "clue" / "afqmc", data / "afqmc")
    script = pathlib.Path(__file__).with_name("signal_evaluate.py")
    return subprocess.run([sys.executable, str(script), signal_name, at_runner, f"--workdir={run}", f"--data_dir={data}",
                           "--tasks=zhoblimp,afqmc", f"--output={output}", "--config.scoring.batch_size=8",
                           "--config.finetune.max_len=32"],
                          capture_output=True, text=True, timeout=300)


def test_an_evaluation_stopped_in_fine_tuning_keeps_the_finished_tasks_and_exits_143(tmp_path):
    output = tmp_path / "eval" / "results.json"
    result = _signal_evaluate(tmp_path, "SIGTERM", "finetune", output)
    assert result.returncode == 143, (result.stdout + result.stderr)[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert set(json.loads(output.read_text())) == {"zhoblimp"}
    details = json.loads(output.with_name("results_details.json").read_text())
    assert details["skipped"]["afqmc"] == "not run: stopped by SIGTERM in afqmc"
    assert result.stdout.splitlines()[-1] == (f"evaluate: stopped by SIGTERM in afqmc; the results of zhoblimp are "
                                              f"written to {output}; run the same command to score every task")


def test_an_evaluation_stopped_before_a_task_finished_writes_nothing_and_exits_130(tmp_path):
    output = tmp_path / "eval" / "results.json"
    result = _signal_evaluate(tmp_path, "SIGINT", "minimal_pairs", output)
    assert result.returncode == 130, (result.stdout + result.stderr)[-3000:]
    assert "Traceback" not in result.stdout + result.stderr and "KeyboardInterrupt" not in result.stderr
    assert result.stdout.splitlines()[-1] == ("evaluate: stopped by SIGINT in zhoblimp; no task had finished, so no "
                                              "results are written; run the same command to score every task")
    assert not (tmp_path / "eval").exists()


def _signal_in_compile(signal_name: str, within: str, module: str, *args: str) -> subprocess.CompletedProcess:
    script = pathlib.Path(__file__).with_name("signal_in_compile.py")
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}  # a real compile, not a read from the test cache
    return subprocess.run([sys.executable, str(script), signal_name, within, module, *args], capture_output=True,
                          text=True, timeout=300, env=env)


def _ended_by(result: subprocess.CompletedProcess, signal_name: str, status: int) -> str:
    """The stop line, once the signal waited for the compile it found and the exit is 128 + signum (not a
    segmentation fault's 139 as XLA's threads go on compiling while the interpreter exits)."""
    output = result.stdout + result.stderr
    assert result.returncode == status, output[-3000:]
    assert "Traceback" not in output and "Segmentation fault" not in output
    assert f"{signal_name} received: stopping once the XLA compile under way ends" in result.stderr
    return result.stdout.splitlines()[-1]


@pytest.mark.parametrize("signal_name,status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_stop_during_the_fine_tuning_compile_waits_for_it_and_exits_as_documented(tmp_path, signal_name, status):
    run, data = tmp_path / "run", tmp_path / "data"
    make_run(run)
    shutil.copytree(FIXTURES / "minimal_pairs" / "zhoblimp", data / "zhoblimp")
    shutil.copytree(FIXTURES / "clue" / "afqmc", data / "afqmc")
    output = tmp_path / "eval" / "results.json"
    result = _signal_in_compile(signal_name, "finetune", "babylm_jax.evaluate", f"--workdir={run}",
                                f"--data_dir={data}", "--tasks=zhoblimp,afqmc", f"--output={output}",
                                "--config.scoring.batch_size=8", "--config.finetune.max_len=32")
    assert _ended_by(result, signal_name, status) == (
        f"evaluate: stopped by {signal_name} in afqmc; the results of zhoblimp are written to {output}; "
        "run the same command to score every task")


@pytest.mark.parametrize("within,line", [
    ("-", "evaluate: stopped by SIGTERM; nothing half-written is kept"),  # the first compile: loading the model
    ("run_minimal_pairs", "evaluate: stopped by SIGTERM in zhoblimp; no task had finished"),
])
def test_a_stop_during_a_zero_shot_evaluation_compile_waits_for_it(tmp_path, within, line):
    run, data = tmp_path / "run", tmp_path / "data"
    make_run(run)
    shutil.copytree(FIXTURES / "minimal_pairs" / "zhoblimp", data / "zhoblimp")
    result = _signal_in_compile("SIGTERM", within, "babylm_jax.evaluate", f"--workdir={run}", f"--data_dir={data}",
                                "--tasks=zhoblimp", f"--output={tmp_path / 'eval' / 'results.json'}")
    assert _ended_by(result, "SIGTERM", 143).startswith(line)


def test_a_stop_during_the_training_setup_compile_waits_for_it(tiny_corpus_dir, tmp_path):
    config_file = tmp_path / "config.py"
    config_file.write_text("import ml_collections\n\n\ndef get_config():\n    return ml_collections.ConfigDict(%r)\n"
                           % json.loads(tiny_config(tiny_corpus_dir).to_json()))
    result = _signal_in_compile("SIGINT", "-", "babylm_jax.train", f"--config={config_file}",
                                f"--workdir={tmp_path / 'run'}")
    assert _ended_by(result, "SIGINT", 130).startswith("train: stopped by SIGINT")


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("jax_cuda12_plugin") is None,
                    reason="jax's CUDA plugin is not installed here (pip install -e '.[cuda12]'): aot has no CUDA compile "
                    "to stop")
def test_a_stop_during_an_aot_compile_waits_for_it():
    result = _signal_in_compile("SIGINT", "-", "babylm_jax.aot", "--config=configs/base.py", "--platform=cuda",
                                "--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.d_ff=64",
                                "--config.model.num_layers=1", "--config.model.vocab_size=512",
                                "--config.train.batch_size=8", "--config.train.seq_len=32",
                                "--config.model.attention=xla")
    assert _ended_by(result, "SIGINT", 130) == ("aot: stopped by SIGINT; nothing half-written is kept; run the same "
                                                "command to start again")


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_after_the_work_is_over_changes_nothing(signal_name):
    """A stop that comes while the interpreter shuts down (here from an atexit function) after the command
    finished: exit status 0 and nothing on stderr, not a Stopped traceback from the atexit function (nor,
    later in the shutdown, a kill by the restored default handler: exit status 143 after `done`)."""
    script = ("import atexit, os, signal, time\n"
              "from babylm_jax.config import cli\n"
              f"atexit.register(lambda: (os.kill(os.getpid(), signal.{signal_name}), time.sleep(0.2)))\n"
              "cli.Command('demo', 'a command that is done at once').run(lambda argv: print('done'))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "Stopped" not in result.stderr


def test_a_stop_during_an_import_waits_for_the_module_to_be_whole(tmp_path):
    """An import that a stop breaks off leaves a half-initialised module (a C extension's init then fails as
    ImportError "initialization failed", a task's error rather than a stop): the stop waits for the import."""
    (tmp_path / "signalling_module.py").write_text(
        "import os, pathlib, signal\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        f"pathlib.Path({str(tmp_path / 'whole')!r}).write_text('the import ran to its end')\n")
    script = ("import sys, time\n"
              f"sys.path.insert(0, {str(tmp_path)!r})\n"
              "from babylm_jax.config import cli\n"
              "def main(argv):\n"
              "    import signalling_module\n"
              "    time.sleep(30)\n"
              "cli.Command('demo', 'a command that imports').run(main)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 130, result.stderr[-2000:]
    assert result.stdout == "demo: stopped by SIGINT; nothing half-written is kept; run the same command to start again\n"
    assert (tmp_path / "whole").exists() and "Traceback" not in result.stderr


def test_a_signal_sent_three_times_during_a_compile_ends_the_command_at_once():
    script = ("import os, signal, threading, time\n"
              "import jax, jax.numpy as jnp\n"
              "from babylm_jax.config import cli\n"
              "def deep(x):\n"
              "    for i in range(600):\n"
              "        x = jnp.sin(x) @ x + i\n"
              "    return x\n"
              "def insist():\n"
              "    time.sleep(0.2)\n"
              "    for _ in range(3):\n"
              "        os.kill(os.getpid(), signal.SIGINT)\n"
              "        time.sleep(0.3)  # apart: signals sent at once are one pending signal\n"
              "def main(argv):\n"
              "    lowered = jax.jit(deep).lower(jnp.ones((8, 8)))\n"
              "    threading.Thread(target=insist, daemon=True).start()\n"
              "    lowered.compile()\n"
              "    print('compiled')\n"
              "cli.Command('demo', 'a command that compiles').run(main)\n")
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 130, result.stderr[-2000:]
    assert "compiled" not in result.stdout and "Segmentation fault" not in result.stderr
    assert "SIGINT received 3 times: ending now, in the XLA compile under way" in result.stderr


def test_a_stop_that_finds_jax_code_is_not_swallowed_by_its_bare_except():
    """A stop raised inside JAX's own code can land in one of its `try: ... except:` clauses (core.is_constant_dim
    runs `operator.index` under one, as every trace does), which swallows it: the command went on and exited 0.
    The stop waits for JAX's code to return, then ends the command."""
    script = ("import os, signal, time\n"
              "from jax._src import core\n"
              "from babylm_jax.config import cli\n"
              "class Dim:\n"
              "    def __index__(self):\n"
              "        os.kill(os.getpid(), signal.SIGINT)\n"
              "        for _ in range(100_000):  # the handler runs here, under JAX's bare except\n"
              "            pass\n"
              "        raise TypeError('not a dimension')\n"
              "def main(argv):\n"
              "    core.is_constant_dim(Dim())\n"
              "    time.sleep(30)\n"
              "    print('went on')\n"
              "cli.Command('demo', 'a command in JAX code').run(main)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 130, (result.stdout + result.stderr)[-2000:]
    assert "went on" not in result.stdout and time.monotonic() - started < 25
    assert result.stdout == "demo: stopped by SIGINT; nothing half-written is kept; run the same command to start again\n"


@pytest.mark.parametrize("signal_name,status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_stop_while_a_command_imports_is_one_line(signal_name, status):
    """`python -m babylm_jax.evaluate` imports for a second or more before its handlers are set: a SIGINT then
    was a KeyboardInterrupt traceback (or, landing in a garbage-collection callback, ignored: the evaluation
    went on and exited 0), a SIGTERM an exit without a word. Here the package is imported as runpy imports it
    for `-m babylm_jax.evaluate` (argv[0] "-m"), and the signal comes before the command's module is."""
    script = ("import sys\n"
              "sys.argv[:] = ['-m']\n"
              "sys.orig_argv[:] = [sys.executable, '-m', 'babylm_jax.evaluate', '--workdir=run']\n"
              "import babylm_jax\n"
              "import os, signal, time\n"
              f"os.kill(os.getpid(), signal.{signal_name})\n"
              "time.sleep(30)\n"
              "print('went on')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == status, result.stderr[-2000:]
    assert result.stdout == (f"evaluate: stopped by {signal_name} while it started; nothing was done; run the same "
                             "command to start again\n")
    assert "Traceback" not in result.stderr


def test_importing_the_package_as_a_library_sets_no_signal_handler():
    script = ("import signal\n"
              "before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)\n"
              "import babylm_jax\n"
              "assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_stop_raised_in_a_callback_whose_errors_python_ignores_is_sent_again():
    """A stop that lands in a weakref or garbage-collection callback is "Exception ignored" by Python: the
    evaluation went on and exited 0 (seen in a stop during the first compile of a zero-shot evaluation)."""
    script = ("import os, signal, time, weakref\n"
              "from babylm_jax.config import cli\n"
              "class Thing:\n"
              "    pass\n"
              "def callback(ref):\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    for _ in range(100_000):  # the handler runs here, where Python ignores exceptions\n"
              "        pass\n"
              "def main(argv):\n"
              "    thing = Thing()\n"
              "    ref = weakref.ref(thing, callback)\n"
              "    del thing\n"
              "    time.sleep(30)\n"
              "    print('went on')\n"
              "cli.Command('demo', 'a command with a weakref callback').run(main)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 130, (result.stdout + result.stderr)[-2000:]
    assert "went on" not in result.stdout and time.monotonic() - started < 25
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr
