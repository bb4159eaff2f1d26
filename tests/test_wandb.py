"""--report-to wandb (algos/reporters.py): a tiny real run in W&B's offline mode, read back from the
offline run's .wandb file; its resume continues the same W&B run; the config's one-line errors."""

from __future__ import annotations

import importlib.util
import json
import struct
import time
from pathlib import Path

import pytest
from cold_start import COLD_UPDATES

from algos.config import ConfigError, from_flat
from algos.reporters import report_to
from algos.run_dir import read_metrics
from algos.validate import validate

TINY_RUN = ["--num-groups", "2", "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "3",
            "--eval-episodes", "2", "--max-new-tokens", "8", "--max-extra-groups", "2", *COLD_UPDATES]  # fmt: skip
BLOCK = 32 * 1024  # a .wandb file is a LevelDB-style log: 32 KiB blocks of (crc, length, type) chunks


def wandb_records(path: Path, wait_s: float = 30.0) -> list:
    """The protobuf Records of an offline run's run-ID.wandb file, in order, once the run's exit record is
    there: W&B's service process may still be writing the file for a moment after run.finish() returns."""
    deadline = time.monotonic() + wait_s
    while True:
        records = _records(path.read_bytes(), path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _records(data: bytes, path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    if len(data) < 7:  # created, its header not written yet
        return []
    assert data[:4] == b":W&B", f"{path}: not a .wandb file"
    pos, chunks, out = 7, b"", []  # after the 7-byte header: ":W&B", a magic number, a version
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):  # a chunk still being written
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:  # zero fill
            continue
        chunks = chunk if kind in (1, 2) else chunks + chunk  # full, first | middle, last
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(chunks)
            out.append(record)
    return out


def offline_run(records: list) -> dict:
    """What an offline run logged: its id, config keys, history rows ({key: JSON value}) and table keys."""
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    rows = [{"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]  # fmt: skip
    # a table is logged as its fields, each under its own nested key: transcripts/_type = "table-file", ...
    tables = {k.removesuffix("/_type") for row in rows for k, v in row.items()
              if k.endswith("/_type") and v == "table-file"}  # fmt: skip
    return {"id": run.run_id, "config": {u.key for u in run.config.update}, "rows": rows, "tables": tables}


def test_report_to_names() -> None:
    assert report_to("tensorboard") == ("tensorboard",)
    assert report_to(" tensorboard, wandb ,wandb") == ("tensorboard", "wandb")
    for bad in ("tensorbord", "wandb,mlflow", "", "none,wandb"):
        with pytest.raises(ValueError, match="--report-to") as e:
            report_to(bad)
        assert "\n" not in str(e.value)


def test_report_to_errors_are_one_line(monkeypatch) -> None:
    with pytest.raises(ConfigError, match="unknown reporter mlflow"):
        validate(from_flat({"report_to": "tensorboard,mlflow"}))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'textrl\[wandb\]'") as e:
        validate(from_flat({"report_to": "wandb"}))
    assert "\n" not in str(e.value)


def test_run_dir_reports_to_wandb_alone(tmp_path, monkeypatch) -> None:
    """RunDir with --report-to wandb: no TensorBoard files; rows, config and a transcript table offline."""
    pytest.importorskip("wandb")
    from algos.run_dir import RunDir

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)  # the W&B files then go into the run directory
    run = RunDir(tmp_path / "run", {"report_to": "wandb", "lr": 0.1})
    run.log(0, {"sft/loss": 2.0})
    step = dict(t=0, observation="a room", response="go", action="go", status="ok", valid=True, reward=1.0)
    run.log_transcript(1, dict(group=0, seed=7, task="t", won=True, steps=[step, {**step, "t": 1}]), "text")
    run.log(1, {"train/loss": 0.5, "train/kl": float("nan")})
    run.close()
    assert not list(run.path.glob("events.out.tfevents.*"))
    (path,) = run.path.glob("wandb/offline-run-*/run-*.wandb")
    logged = offline_run(wandb_records(path))
    assert logged["config"] >= {"report_to", "lr"} and logged["tables"] == {"transcripts"}
    assert [(r["iteration"], r.get("train/loss")) for r in logged["rows"]] == [(0, None), (1, 0.5)]
    assert "train/kl" not in logged["rows"][1]  # non-finite values are left out, as TensorBoard leaves them
    assert json.loads((run.path / "wandb_run.json").read_text())["id"] == logged["id"]


def test_report_to_none_writes_metrics_only(tmp_path) -> None:
    from algos.run_dir import RunDir

    run = RunDir(tmp_path, {"report_to": "none"})
    run.log(1, {"train/loss": 0.5})
    run.close()
    assert read_metrics(tmp_path) == [{"iteration": 1, "train/loss": 0.5}]
    assert not list(tmp_path.glob("events.out.tfevents.*")) and not (tmp_path / "wandb_run.json").exists()


@pytest.mark.slow
def test_a_run_and_its_resume_report_to_one_wandb_run(tmp_path, monkeypatch) -> None:
    pytest.importorskip("wandb")
    from algos.train import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    flags = ["--iterations", "1", "--report-to", "tensorboard,wandb", "--wandb-name", "tiny", *TINY_RUN]
    assert main([*flags, "--output-dir", str(out)]) == 0
    assert list(out.glob("events.out.tfevents.*"))  # TensorBoard as before
    saved = json.loads((out / "wandb_run.json").read_text())
    (first,) = [offline_run(wandb_records(p)) for p in tmp_path.glob("wandb/offline-run-*/run-*.wandb")]
    assert first["id"] == saved["id"]
    assert {"report_to", "algo", "lr", "iterations"} <= first["config"]
    logged = {k for row in first["rows"] for k in row}
    scalars = {k for row in read_metrics(out) for k, v in row.items() if v is not None}
    assert scalars <= logged  # every metrics.jsonl tag, "iteration" among them
    assert {"train/loss", "rollout/success_rate", "eval/success_rate", "sft/loss"} <= logged
    assert "transcripts" in first["tables"]
    (table,) = tmp_path.glob("wandb/offline-run-*/files/media/table/transcripts_*.table.json")
    columns = json.loads(table.read_text())["columns"]  # one row per step, its episode's fields first
    assert columns[:5] == ["iteration", "group", "seed", "task", "won"]
    assert {"observation", "response", "action", "reward", "advantage", "prompt"} <= set(columns)
    loss = [row for row in first["rows"] if "train/loss" in row]
    assert [row["iteration"] for row in loss] == [1]
    assert loss[0]["train/loss"] == pytest.approx(next(r for r in read_metrics(out) if "train/loss" in r)["train/loss"])

    assert main(["--resume", str(out), "--iterations", "2"]) == 0
    runs = sorted(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 2 and json.loads((out / "wandb_run.json").read_text())["id"] == saved["id"]
    resumed = [offline_run(wandb_records(p)) for p in runs]
    assert {r["id"] for r in resumed} == {saved["id"]}  # the same W&B run, continued
    second = next(r for r in resumed if any(row.get("iteration") == 2 for row in r["rows"]))
    assert [row["iteration"] for row in second["rows"] if "train/loss" in row] == [2]

    from scripts.evaluate import main as evaluate  # its plots of a checkpoint go to the same W&B run

    assert evaluate(["--checkpoint", str(out / "checkpoints" / "iter_2"), "--episodes", "2",
                     "--output", str(tmp_path / "eval" / "report.json")]) == 0  # fmt: skip
    runs = [offline_run(wandb_records(p)) for p in tmp_path.glob("wandb/offline-run-*/run-*.wandb")]
    assert len(runs) == 3 and {r["id"] for r in runs} == {saved["id"]}
    images = {k: v for r in runs for row in r["rows"] for k, v in row.items() if v == "image-file"}
    assert set(images) == {"eval/report_tasks/_type", "eval/report_steps/_type"}
