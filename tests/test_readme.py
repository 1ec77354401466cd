"""The README stays true: short enough to read in ten minutes, its set-up commands are
the ones CI runs, every ``diffmb`` command in it parses, and (slow job) every command and
every Python block runs as written, each command within a laptop's patience."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diffmb import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: What "reasonable time on a 2-core laptop" means for one README command, compile included.
COMMAND_LIMIT_S = 300


def _blocks(kind: str) -> list:
    return re.findall(rf"```{kind}\n(.*?)```", README.read_text(), re.S)


def _setup_commands() -> tuple:
    """``(main job, test command)``: the two ``bash`` blocks of "Set up"."""
    section = README.read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    main, tests = [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S)]
    return main, tests


def _diffmb_commands() -> list:
    """Every ``diffmb ...`` command of the README, in order: the main job's (after its
    install), then each line of the other ``bash`` blocks (comments dropped)."""
    main, _ = _setup_commands()
    out = [part.strip() for part in main.split("&&") if part.strip().startswith("diffmb ")]
    for block in _blocks("bash"):
        for line in block.strip().splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("diffmb "):
                out.append(line)
    return out


def test_the_readme_is_short_and_its_setup_is_what_ci_runs():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    main, tests = _setup_commands()
    assert "pip install -e '.[plot]'" in main and "diffmb run" in main
    assert tests.endswith("python -m pytest -q") and "pip install -e '.[dev]'" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[dev]'" in ci and "python -m pytest -q" in ci
    for link in re.findall(r"`(docs/[\w.-]+\.md)`", text) + ["CHANGELOG.md"]:
        assert (ROOT / link).is_file(), link


def test_every_readme_command_parses():
    """A renamed flag or command would fail here, before anyone runs the README."""
    commands = _diffmb_commands()
    assert len(commands) >= 15
    parser = cli.build_parser()
    for line in commands:
        argv = shlex.split(line)[1:]
        try:
            args = parser.parse_args(argv)
        except SystemExit:  # argparse's own exit on an unknown flag
            pytest.fail(f"README command does not parse: {line}")
        assert args.command in cli.COMMANDS, line


def test_every_python_block_compiles():
    blocks = _blocks("python")
    assert len(blocks) >= 2
    for i, code in enumerate(blocks):
        compile(code, f"README.md python block {i}", "exec")


@pytest.fixture()
def readme_folder(tmp_path, monkeypatch):
    """A folder to run the README in, as from the repository root (its ``examples/``)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


#: The README's commands run as this many tests, so that the slow job's workers share them.
COMMAND_GROUPS = 3


def _command_groups(commands: list, n: int = COMMAND_GROUPS) -> list:
    """``commands`` in ``n`` groups, each in the README's order: a command that names a
    file another names (the same path up to its extension: ``view out/fold-4panel.npz``
    reads what ``run fold-4panel --json out/fold-4panel.json --out out`` wrote) goes with
    it; otherwise each set of linked commands goes to the group with the fewest so far."""
    stems = [{f.rsplit(".", 1)[0] for f in re.findall(r"(?:^|\s)(out/[\w./-]+\.\w+)", c)} for c in commands]
    parent = list(range(len(commands)))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(commands)):
        for j in range(i):
            if stems[i] & stems[j]:
                parent[root(i)] = root(j)
    groups, where = [[] for _ in range(n)], {}
    for i, c in enumerate(commands):
        r = root(i)
        if r not in where:
            where[r] = min(range(n), key=lambda g: len(groups[g]))
        groups[where[r]].append(c)
    return groups


def test_the_readme_commands_are_grouped_with_the_commands_whose_files_they_read():
    groups = _command_groups(_diffmb_commands())
    assert sorted(c for g in groups for c in g) == sorted(_diffmb_commands())
    assert all(groups) and max(map(len, groups)) - min(map(len, groups)) <= 2
    for reader, writer in (("diffmb view out/fold-4panel.npz", "diffmb run fold-4panel --json out/fold-4panel.json"),
                           ("diffmb fit fold-4panel --data out/deploy.csv", "diffmb synth fold-4panel")):
        g = next(g for g in groups if any(c.startswith(reader) for c in g))
        assert [c for c in g if c.startswith(writer)], (reader, g)
        assert min(i for i, c in enumerate(g) if c.startswith(writer)) < min(
            i for i, c in enumerate(g) if c.startswith(reader))


@pytest.mark.slow
@pytest.mark.parametrize("group", range(COMMAND_GROUPS))
def test_every_readme_command_runs_in_reasonable_time(readme_folder, group):
    script = shutil.which("diffmb", path=str(Path(sys.executable).parent)) or shutil.which("diffmb")
    took = {}
    for line in _command_groups(_diffmb_commands())[group]:
        tic = time.perf_counter()
        r = subprocess.run([script, *shlex.split(line)[1:]], cwd=readme_folder, capture_output=True, text=True,
                           timeout=COMMAND_LIMIT_S)
        took[line] = time.perf_counter() - tic
        assert r.returncode == 0, (line, r.stderr[-2000:])
    print("\n".join(f"{s:6.1f} s  {line}" for line, s in took.items()))


@pytest.mark.slow
def test_every_readme_python_block_runs(readme_folder):
    namespace = {}
    for i, code in enumerate(_blocks("python")):
        exec(compile(code, f"README.md python block {i}", "exec"), namespace)
    assert namespace["traj"].status == "success"
    assert set(namespace["fitted"].params) == {"K", "c"}
