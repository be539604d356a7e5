"""Every command ends on SIGTERM or SIGINT with one line saying what is kept (issue 27) and exit
status 128 + the signal's number (issue 35): 143 for SIGTERM, 130 for SIGINT, so that
`train && evaluate` stops there."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import tiny_config
from fixtures.data import synthetic

from babylm_jax.config import cli


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_is_one_line_and_its_exit_status(capsys, signum, status):
    def stopped():
        raise cli.Stopped(signum, f"stopped by {signal.Signals(signum).name}; nothing half-written is kept")

    with pytest.raises(SystemExit) as exit_info:
        cli.report_errors("evaluate", stopped)
    assert exit_info.value.code == status
    assert capsys.readouterr().out == f"evaluate: stopped by {signal.Signals(signum).name}; nothing half-written is kept\n"


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

