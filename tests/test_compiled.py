"""Every step shape compiled before step 1: each curriculum length and the eval step, counted."""
import jax
import jax.numpy as jnp
import pytest
from conftest import tiny_config

from babylm_jax.config.schema import RunConfig
from babylm_jax.training import compiled, loop, metrics


def test_curriculum_lengths_are_those_still_ahead_in_order():
    config = tiny_config("unused")
    config.train.update(num_steps=10, seq_len=32, seq_len_curriculum=((0.0, 8), (0.5, 16), (0.9, 32)))
    train = RunConfig.from_config(config).train
    assert compiled.curriculum_lengths(train, 0, 10) == [8, 16, 32]
    assert compiled.curriculum_lengths(train, 6, 10) == [16, 32]  # resumed in the second phase
    assert compiled.curriculum_lengths(train, 0, 3) == [8]  # stop_at_step before the next phase


@pytest.mark.slow
def test_each_step_shape_compiles_once_and_before_step_1(tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    """Traces of the train and eval steps (one trace, one compile) against the steps run: two
    curriculum lengths and the eval step, three programs, all compiled before the first step,
    none after it, though the run reaches both lengths and evaluates three times."""
    events = []

    def counting(make, name):
        def make_counted(*args, **kwargs):
            step = make(*args, **kwargs)

            def traced(*step_args):
                events.append(name)  # runs when jax traces the step, i.e. once per compile
                return step(*step_args)

            return traced
        return make_counted

    monkeypatch.setattr(compiled, "make_train_step", counting(compiled.make_train_step, "train"))
    monkeypatch.setattr(compiled, "make_eval_step", counting(compiled.make_eval_step, "eval"))
    step_done = metrics.StepLogger.step_done
    monkeypatch.setattr(metrics.StepLogger, "step_done",
                        lambda self, step, *a: events.append(f"step {step}") or step_done(self, step, *a))
    config = tiny_config(tiny_corpus_dir)
    config.train.update(num_steps=12, eval_every_steps=4, seq_len_curriculum=((0.0, 16), (0.5, 32)))
    capsys.readouterr()
    loop.train_and_evaluate(RunConfig.from_config(config), str(tmp_path))
    out = capsys.readouterr().out
    assert events[:3] == ["train", "train", "eval"]
    assert events[3:] == [f"step {s}" for s in range(1, 13)]
    assert "train step, rows of 16: compiled" in out and "train step, rows of 32: compiled" in out
    assert "eval step, " in out and "temporaries" in out and "compiled 3 programs before step 1" in out


def test_a_shape_that_was_not_compiled_is_refused():
    programs = compiled.StepPrograms(None)
    with pytest.raises(RuntimeError, match="no train step was compiled for rows of 64"):
        programs.train(64)


def test_memory_analysis_reads_xla_byte_counts():
    program = compiled.compile_program("double", jax.jit(lambda x: x * 2, donate_argnums=0),
                                       jax.ShapeDtypeStruct((256, 256), jnp.float32))
    assert program.memory["arguments"] == 256 * 256 * 4 and program.memory["outputs"] == 256 * 256 * 4
    assert "double: compiled in" in program.describe() and "peak ~" in program.describe()
