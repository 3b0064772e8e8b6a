"""One build of a run at a time: a second build of a run being built, or `--force` on it, is
refused in one sentence naming the process that holds it, while the first completes; a lock
left by a killed build is taken over."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from vqlc_core.base.lock import lock_path, run_lock
from vqlc_core.base.runio import RunError
from vqlc_core.pipeline.cli import main

# the smallest real build: MiniLM frozen on 60 MR sentences, texts and extraction only
ARGS = ["extract", "--limit", "60", "--finetune", "none", "--max-length", "32"]


def start(cache, run: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "vqlc_core", *ARGS, "--run", run, "--cache-dir", str(cache)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_lock(proc: subprocess.Popen, cache, run: str, timeout: float = 600) -> None:
    """Until `proc` holds the run's lock (its pid is in the lock file); fails if it ends first."""
    path = lock_path(cache / "runs" / run)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip() and json.loads(path.read_text())["pid"] == proc.pid:
            return
        assert proc.poll() is None, f"the first build ended before it locked the run: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError("the first build never locked the run")


def test_the_lock_refuses_a_second_holder_in_one_sentence_and_frees_on_exit(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    with run_lock(run_dir):
        with pytest.raises(RunError) as err:
            with run_lock(run_dir):
                pass
        msg = str(err.value)
        assert f"process {os.getpid()}" in msg and "\n" not in msg
    with run_lock(run_dir):  # released when the first block ended
        pass


@pytest.mark.slow
def test_a_second_build_of_a_run_being_built_is_refused_and_the_first_completes(tmp_path, capsys):
    first = start(tmp_path, "both")
    try:
        wait_for_lock(first, tmp_path, "both")
        first.send_signal(signal.SIGSTOP)  # held mid-build however fast or loaded the machine is
        try:
            for extra in ([], ["--force"]):
                code = main(["build", "--run", "both", "--cache-dir", str(tmp_path), "--limit", "60", *extra])
                err = capsys.readouterr().err.strip()
                assert code == 2 and len(err.splitlines()) == 1, err
                assert f"is being built by process {first.pid}" in err
        finally:
            first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
        assert json.loads((tmp_path / "runs" / "both" / "manifest.json").read_text())["stages"]["extract"]["state"] \
            == "complete"
    finally:
        if first.poll() is None:
            first.kill()


@pytest.mark.slow
def test_a_lock_left_by_a_killed_build_is_taken_over(tmp_path, capsys):
    first = start(tmp_path, "killed")
    wait_for_lock(first, tmp_path, "killed")
    first.kill()
    first.wait(timeout=60)
    assert json.loads(lock_path(tmp_path / "runs" / "killed").read_text())["pid"] == first.pid  # left behind
    code = main([*ARGS, "--run", "killed", "--cache-dir", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    assert json.loads(lock_path(tmp_path / "runs" / "killed").read_text())["pid"] == os.getpid()


def test_a_waiting_lock_waits_for_the_process_that_holds_it(tmp_path):
    import threading

    from vqlc_core.base.lock import waiting_lock

    path = tmp_path / "shared" / ".download.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom vqlc_core.base.lock import waiting_lock\n"
         f"with waiting_lock({str(path)!r}):\n    print('held', flush=True)\n    sys.stdin.readline()\n"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        got = threading.Event()

        def take():
            with waiting_lock(path):
                got.set()

        waiter = threading.Thread(target=take, daemon=True)
        waiter.start()
        assert not got.wait(1.0)  # the other process holds it: this one waits
        holder.stdin.write("done\n")
        holder.stdin.flush()
        assert holder.wait(60) == 0
        waiter.join(60)
        assert got.is_set()  # taken once the holder let go
    finally:
        holder.kill()
