"""bench_first_run.py times the README's first training run: the command it times is the README's,
and bad counts are refused before anything runs."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def bench_first_run():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_first_run_under_test", BENCH / "bench_first_run.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_it_times_the_command_the_readme_shows():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(\.venv/bin/empo2-studio train .*?)\n```", readme, re.S)
    assert block, "the README's first-run code block is gone"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    assert words[0] == ".venv/bin/empo2-studio"
    assert words[1:] == bench_first_run().COMMAND


@pytest.mark.parametrize("argv, message", [(["--warm", "-1"], "--warm must be ≥ 0, got -1"),
                                           (["--threads", "0"], "--threads must be ≥ 1, got 0")])
def test_bad_counts_are_refused_before_a_run(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_first_run().main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
