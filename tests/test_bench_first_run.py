"""bench_first_run.py times the README's first training run: the command it times is the README's,
and bad counts are refused before anything runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from scripts import load_bench

ROOT = Path(__file__).resolve().parents[1]


def test_it_times_the_command_the_readme_shows():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(\.venv/bin/empo2-studio train .*?)\n```", readme, re.S)
    assert block, "the README's first-run code block is gone"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    assert words[0] == ".venv/bin/empo2-studio"
    assert words[1:] == load_bench("bench_first_run").COMMAND


@pytest.mark.parametrize("argv, message", [(["--warm", "-1"], "--warm must be ≥ 0, got -1"),
                                           (["--threads", "0"], "--threads must be ≥ 1, got 0")])
def test_bad_counts_are_refused_before_a_run(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_bench("bench_first_run").main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
