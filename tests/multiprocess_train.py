"""Runs a 3-step tiny training as one of N JAX processes on localhost (test_training helper).

    python multiprocess_train.py CORPUS_DIR WORKDIR NUM_PROCESSES PROCESS_ID PORT

With BABYLM_TEST_NO_SOURCES=1, processes other than 0 fail if they read the corpus's sources.
"""
import os
import pathlib
import sys

from conftest import tiny_config

from babylm_jax.config.schema import RunConfig
from babylm_jax.corpus import sources
from babylm_jax.training import loop


def main() -> None:
    corpus_dir, workdir, num_processes, process_id, port = sys.argv[1:]
    config = tiny_config(pathlib.Path(corpus_dir))
    config.train.update(num_steps=3, eval_every_steps=100)
    config.mesh.num_devices = 0
    if int(num_processes) > 1:
        config.distributed.update(
            initialize=True, coordinator_address=f"localhost:{port}",
            num_processes=int(num_processes), process_id=int(process_id),
        )
    if os.environ.get("BABYLM_TEST_NO_SOURCES") and int(process_id) > 0:
        def refuse(*_):
            raise RuntimeError(f"process {process_id} read the corpus's sources; only process 0 may")

        sources.list_sources = refuse
    loop.train_and_evaluate(RunConfig.from_config(config), workdir)


if __name__ == "__main__":
    main()
