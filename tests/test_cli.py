"""The command line: clear errors for bad flags, and the demo end to end on a local Ray."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from arrow_split.__main__ import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--steps", "0"], "argument --steps: expected a positive integer, got 0"),
        (["demo", "--dp-size", "x"], "argument --dp-size: expected a positive integer, got 'x'"),
        (["demo", "--mode", "lazy"], "argument --mode: invalid choice: 'lazy'"),
        (
            ["demo", "--samples", "10", "--dp-size", "4"],
            "the balanced plan needs --samples (10) to be a multiple of --dp-size (4)",
        ),
        (
            ["demo", "--mean-response", "100", "--max-response", "50"],
            "--max-response (50) must be >= --mean-response (100)",
        ),
        ([], "the following arguments are required: command"),
    ],
)
def test_bad_flags_exit_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_flags_do_not_import_ray_or_torch() -> None:
    code = (
        "import sys\n"
        "from arrow_split.__main__ import main\n"
        "try:\n    main(['demo', '--steps', '0'])\nexcept SystemExit:\n    pass\n"
        "print('ray' in sys.modules, 'torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False False"


def _raylets() -> int:
    result = subprocess.run(["pgrep", "-c", "-f", "ray/raylet"], capture_output=True, text=True)
    return int(result.stdout.strip() or 0)


@pytest.mark.ray
def test_the_demo_runs_both_modes_and_checks_every_sample() -> None:
    before = _raylets()
    argv = ["demo", "--samples", "48", "--dp-size", "6", "--steps", "2", "--moe"]
    result = subprocess.run(
        [sys.executable, "-m", "arrow_split", *argv],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert sum(line.startswith(("eager ", "delayed ")) for line in lines) == 4
    assert all(line.split()[-1] == "48" for line in lines if line.startswith(("eager", "delayed")))
    assert "every sample reached exactly one rank with its values intact" in result.stdout
    deadline = time.monotonic() + 20  # raylets exit shortly after ray.shutdown() returns
    while _raylets() > before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _raylets() <= before  # the demo stopped the Ray it started


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    import arrow_split

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"arrow-split {arrow_split.__version__}"


def test_demo_help_shows_defaults_and_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    assert "(default: 512)" in text
    assert "(default: both)" in text
    assert "`" not in text
    assert "**" not in text


def test_the_demo_without_ray_says_what_to_install_on_one_line() -> None:
    code = (
        "import sys\n"
        "sys.modules['ray'] = None\n"  # `import ray` raises ImportError, as without Ray
        "from arrow_split.__main__ import main\n"
        "sys.exit(main(['demo', '--steps', '1']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "needs Ray (not installed); install it with: pip install '.[ray]'" in lines[0]


@pytest.mark.ray
def test_the_demo_without_torch_checks_arrow_values_and_says_what_it_does() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"  # as without torch
        "from arrow_split.__main__ import main\n"
        "sys.exit(main(['demo', '--samples', '8', '--dp-size', '2', '--steps', '1',"
        " '--mode', 'eager']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    progress = result.stderr.splitlines()
    assert progress[0].startswith("starting a local Ray")
    assert any("torch is not installed" in line for line in progress)
    assert any(line.startswith("eager hand-off, step 1 of 1") for line in progress)
    assert "every sample reached exactly one rank with its values intact" in result.stdout
