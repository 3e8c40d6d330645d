"""Bad inputs to the experiment commands: each is refused with exit status 2 and one
``error: ...`` line naming the path or flag and the cause, with no traceback, and leaves
no run folder behind. Through the command line where the flag parsing matters, else
through the same functions in-process (`experiments.common.exit_on_error`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from experiments import common, evaluate
from tests import run_folder_util as rf

pytest.importorskip("algorithms.ppo.train")


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> str:
    """The uninterrupted reference run (shared, read only)."""
    return rf.reference(tmp_path_factory)


def _refused(out: subprocess.CompletedProcess, start: str) -> str:
    assert out.returncode == 2, out.stderr[-2000:]
    line = rf.last_error_line(out.stderr)
    assert line.startswith(start), line
    assert "Traceback" not in out.stderr and "Event loop is closed" not in out.stderr
    return line


def test_command_lines_refused_before_any_work(tmp_path):
    """Bad command lines exit with status 2 and one ``error:`` line each, before any work
    and without making the run folder: a --config file that does not exist, raises (an
    unknown preset), does not parse, defines no get_config(), or is a run folder's
    config.json; ``--config PATH`` naming no file; a --workdir that is a file or lies
    under a file; --num_devices=abc; a flag value of the wrong type (one process runs
    them all: `rf.commands_in_one_process`)."""
    (tmp_path / "syntax.py").write_text("def get_config(:\n")
    (tmp_path / "empty.py").write_text("X = 1\n")
    (tmp_path / "config.json").write_text('{"seed": false}\n')
    f = tmp_path / "file"
    f.write_text("x")
    wd = str(tmp_path / "run")
    cases = [
        (["--config=experiments/configs/nope.py:tiny"],
         "error: --config=experiments/configs/nope.py:tiny: "),
        (["--config=experiments/configs/cartpole.py:bogus"],
         "error: --config=experiments/configs/cartpole.py:bogus: ValueError: unknown config "
         "preset(s) ['bogus']"),
        ([f"--config={tmp_path}/syntax.py"], f"error: --config={tmp_path}/syntax.py: SyntaxError"),
        ([f"--config={tmp_path}/empty.py"], f"error: --config={tmp_path}/empty.py: the file "
         "defines no get_config()"),
        ([f"--config={tmp_path}/config.json"], f"error: --config={tmp_path}/config.json: "
         "NameError: name 'false' is not defined (a config file is Python"),
        (["--config", f"{tmp_path}/none.py"], f"error: --config={tmp_path}/none.py: "
         f"{tmp_path}/none.py: no such file"),
        ([*rf.ARGS, f"--workdir={f}"], f"error: {f}: --workdir is a file"),
        ([*rf.ARGS, f"--workdir={f / 'sub'}"], f"error: {f / 'sub'}: Not a directory"),
        ([*rf.ARGS, f"--workdir={wd}", "--num_devices=abc"],
         "error: --num_devices=abc: expected an integer"),
        ([*rf.ARGS, f"--workdir={wd}", "--config.num_envs=four"],
         "error: flag --config.num_envs=four: "),
    ]  # fmt: skip
    results = rf.commands_in_one_process("experiments.train", [c for c, _ in cases])
    for (args, start), (code, err, _) in zip(cases, results, strict=True):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(start), (args, err)
    assert not os.path.exists(wd)


def test_evaluate_inputs(ref, tmp_path):
    """evaluate on a file, on a missing folder, on a truncated or non-object config.json,
    on a folder without checkpoints: one line naming the path; train on such a folder
    names the damaged config.json too and changes nothing."""
    f = tmp_path / "file"
    f.write_text("x")
    missing = tmp_path / "missing"
    wd = rf.copy_run(ref, str(tmp_path / "run"))
    path = os.path.join(wd, "config.json")
    text = open(path).read()
    open(path, "w").write(text[: len(text) // 2])
    cases = [
        (f, f"error: {f}: not a run folder"),
        (missing, f"error: {missing}: no config.json"),
        (wd, f"error: {path}: not valid JSON"),
    ]
    commands = [[f"--workdir={d}"] for d, _ in cases]
    results = rf.commands_in_one_process("experiments.evaluate", commands)
    for (d, start), (code, err, std) in zip(cases, results, strict=True):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(start), (d, err, std)
    with pytest.raises(SystemExit) as e:
        common.exit_on_error(common.load_config, wd)
    assert e.value.code == 2
    before = rf.snapshot(wd)
    _refused(rf.train(wd), f"error: {path}: not valid JSON")
    assert rf.snapshot(wd) == before
    open(path, "w").write("[1, 2]")
    with pytest.raises(ValueError, match=r"config.json: holds a JSON list, not a config"):
        evaluate.evaluate(wd)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(os.path.join(ref, "config.json"), bare)
    with pytest.raises(ValueError, match=r"bare: no checkpoints in .*: train first"):
        evaluate.evaluate(str(bare))
    good = rf.copy_run(ref, str(tmp_path / "good"))
    for bad in (0, -5):
        with pytest.raises(ValueError, match=r"max_steps \(--max_steps\) must be an integer >= 1"):
            evaluate.evaluate(good, max_steps=bad)
    (tmp_path / "folder.gif").mkdir()
    for bad, why in ((f / "x.gif", ".*file is a file, not a folder"),
                     (tmp_path / "folder.gif", "is a folder"),
                     (tmp_path / "x.png", "the file name must end in .gif or .mp4")):  # fmt: skip
        with pytest.raises(ValueError, match=rf"^--animation={bad}: {why}"):
            evaluate.evaluate(good, animation=str(bad))
    evaluate._check_animation_path(str(tmp_path / "new" / "a.gif"))  # made when written
    config = json.load(open(os.path.join(good, "config.json")))
    json.dump({**config, "env_kwargs": [1, 2]}, open(os.path.join(good, "config.json"), "w"))
    with pytest.raises(ValueError, match=r"config.env_kwargs must map env options to values"):
        evaluate.evaluate(good)


def test_evaluate_refuses_an_edited_config(ref, tmp_path, capsys):
    """A config.json edited after training (another gamma) no longer matches the
    checkpoint's config hash: evaluate refuses it, naming the file; with
    --allow_config_change it evaluates with it and warns."""
    wd = rf.copy_run(ref, str(tmp_path / "run"))
    path = os.path.join(wd, "config.json")
    cfg = json.load(open(path))
    cfg["algo"]["gamma"] = 0.5
    json.dump(cfg, open(path, "w"))
    with pytest.raises(ValueError, match=rf"{path}: does not match checkpoint 10 .* edited"):
        evaluate.evaluate(wd)
    res = evaluate.evaluate(wd, episodes=2, max_steps=10, allow_config_change=True)
    assert res["step"] == 10
    err = capsys.readouterr().err
    assert "warning:" in err and "evaluating with it anyway" in err


def test_output_path_checks(tmp_path):
    """`common.check_output_path` (for command outputs such as the benchmark's --out)
    names the flag, the path and the cause before any work; `write_text` names the file
    it cannot write."""
    ok = str(tmp_path / "out.json")
    assert common.check_output_path(ok) == ok
    with pytest.raises(ValueError, match=r"--out=.*: is a folder"):
        common.check_output_path(str(tmp_path))
    with pytest.raises(ValueError, match=r"--out=.*nope/x.json: its folder .*nope does not exist"):
        common.check_output_path(str(tmp_path / "nope" / "x.json"))
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match=r"its folder .*file is a file"):
        common.check_output_path(str(f / "x.json"))
    with pytest.raises(OSError) as e:
        common.write_text(str(tmp_path / "nope" / "x.json"), "{}")
    assert common.error_line(e.value).startswith(str(tmp_path / "nope" / "x.json.tmp"))
    common.write_text(ok, "{}\n")
    assert open(ok).read() == "{}\n" and not os.path.exists(ok + ".tmp")


def test_rounding_of_total_env_steps_is_announced_once(capsys):
    """total_env_steps that is not a whole number of iterations is said once, with the
    number of env steps that will really be trained; a whole number says nothing."""
    import types

    from experiments.train import _announce_rounding

    trainer = types.SimpleNamespace(num_iterations=6)
    _announce_rounding({"num_envs": 64, "num_steps": 50, "total_env_steps": 20000}, trainer)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "total_env_steps=20,000 is not a multiple of num_envs*num_steps=3,200" in err
    assert "training 6 iterations = 19,200 env steps" in err
    _announce_rounding({"num_envs": 64, "num_steps": 50, "total_env_steps": 19200}, trainer)
    assert capsys.readouterr().err == ""


def test_trim_jsonl_moves_records_past_the_checkpoint(tmp_path):
    """eval.jsonl on resume: records past the restored iteration (and torn ones) are
    moved to eval.jsonl.discarded-1; the rest stays in order."""
    path = str(tmp_path / "eval.jsonl")
    open(path, "w").write('{"iteration": 2}\n{"iteration": 4}\n{"iteration": 6}\n{"iter')
    assert common.trim_jsonl(path, 4) == 2
    assert open(path).read() == '{"iteration": 2}\n{"iteration": 4}\n'
    assert open(path + ".discarded-1").read() == '{"iteration": 6}\n{"iter\n'
    assert common.trim_jsonl(path, 4) == 0 and common.trim_jsonl(str(tmp_path / "x"), 1) == 0
