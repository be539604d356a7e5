"""CI runs the README's test command and installs nothing the README does not show."""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    commands = [block.strip() for block in blocks if "pytest" in block]
    assert len(commands) == 1, commands  # one test command, a single line
    assert "\n" not in commands[0], commands[0]
    return commands[0]


def test_ci_runs_the_readmes_test_command_and_no_other_install():
    command = readme_test_command()
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    steps = [line for line in lines if line and not line.startswith("#")]
    assert steps[-1] == command, (steps[-1], command)
    for step in steps[:-1]:
        assert not re.search(r"\b(pip|install|pytest)\b", step), f".ci/run: {step!r} is not in the README's test command"
