"""``sitecal predict`` on Dask: a LocalCluster of 2 workers, one killed mid-shard, equals one process.

The model is the demo CNN slowed down (:mod:`tests.slow_model`), so that a shard is still running when
its worker is killed; the scheduler runs the lost shard again on the restarted worker and the merged
predictions file equals a single process's, byte for byte.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.conftest import write_demo_protocol

from sitecal.cli import main
from sitecal.demo import generate_demo
from sitecal.errors import ModelError
from sitecal.inference import _sharded
from sitecal.inference._shard_parts import Part, merge_parts, read_part, write_part
from sitecal.inference._sharded import Placement, shard_size_for

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("sharded")
    manifest = generate_demo(root / "data", n_studies=120, seed=5)
    path = write_demo_protocol(
        root, manifest, inputs={"num_workers": 2, "batch_size": 4, "logit_cache": False}, n_resamples=50
    )
    protocol = yaml.safe_load(path.read_text())
    protocol["model"]["architecture"] = "tests.slow_model:SlowDemoNet"  # 80 ms more per batch
    path.write_text(yaml.safe_dump(protocol, sort_keys=False))
    single = root / "single.csv"
    assert main(["predict", str(path), "--output", str(single), "--no-progress"]) == 0
    return {"root": root, "protocol": path, "single": single}


def test_a_worker_killed_mid_shard_changes_no_byte(cohort: dict) -> None:
    from distributed import Client, LocalCluster

    output = cohort["root"] / "sharded.csv"
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        codes: list[int] = []
        args = ["predict", str(cohort["protocol"]), "--output", str(output), "--no-progress"]
        args += ["--scheduler", cluster.scheduler_address, "--shard-size", "16"]
        thread = threading.Thread(target=lambda: codes.append(main(args)))
        thread.start()
        victim, pid, shard = _kill_a_worker_mid_shard(client, cohort["root"])
        thread.join(timeout=400)
        assert not thread.is_alive()
        assert codes == [0]
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the killed worker is gone, and the run finished without it
        assert victim not in client.scheduler_info()["workers"]
        assert shard.startswith("sitecal-shard-")
    assert output.read_bytes() == cohort["single"].read_bytes()
    exclusions = cohort["root"] / "sharded-exclusions.csv"
    assert exclusions.read_bytes() == (cohort["root"] / "single-exclusions.csv").read_bytes()
    assert not (cohort["root"] / "reports" / ".sitecal-shards").exists()  # merged parts are removed


def _kill_a_worker_mid_shard(client: object, root: Path) -> tuple[str, int, str]:
    """SIGKILL a worker while it computes a shard whose part is not written; its address, pid and task."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for worker, tasks in client.processing().items():  # type: ignore[attr-defined]
            shards = [t for t in tasks if str(t).startswith("sitecal-shard-")]
            if shards:
                time.sleep(0.3)  # inside the shard: its first batches are under way (>= 0.3 s each shard)
                parts = {p.name for p in (root / "reports" / ".sitecal-shards").glob("shard-*.npz")}
                index = int(str(shards[0]).split("-")[2])
                assert f"shard-{index:05d}.npz" not in parts, "the shard ended before its worker was killed"
                pid = client.run(os.getpid, workers=[worker])[worker]  # type: ignore[attr-defined]
                os.kill(pid, signal.SIGKILL)
                return worker, pid, str(shards[0])
        time.sleep(0.01)
    raise AssertionError("no shard was seen running")


def test_shards_hold_whole_batches() -> None:
    assert [shard_size_for(n, 16) for n in (1, 16, 17, 256)] == [16, 16, 32, 256]
    assert shard_size_for(10, 3) == 12


def test_a_part_from_another_shard_or_cut_short_is_not_taken(tmp_path: Path) -> None:
    part = tmp_path / "shard-00000.npz"
    assert read_part(part, "abc") is None  # absent
    part.write_bytes(b"PK\x03\x04 not a whole archive")
    assert read_part(part, "abc") is None
    good = Part(np.array([3]), np.zeros((1, 2), np.float32), ((4, "r"),), (), 0, 0)
    write_part(part, good, "abc")
    assert _same(read_part(part, "abc"), good)
    assert read_part(part, "abd") is None  # another shard's signature


def test_the_model_is_broken_only_when_every_shard_says_so() -> None:
    error = ("RuntimeError", "shapes do not match")
    failed = Part(np.zeros(0, np.int64), np.zeros((0, 2), np.float32), ((0, "x"),), (error,), 1, 0)
    fine = Part(np.array([1]), np.zeros((1, 2), np.float32), (), (), 0, 0)
    merged = merge_parts({}, [failed, fine], 2, "m")
    assert merged.ok.tolist() == [1] and merged.failures == ((0, "x"),)
    with pytest.raises(ModelError, match="failed on every study it was given \\(2\\)"):
        merge_parts({}, [failed, failed], 2, "m")


def test_placement_refuses_nonsense() -> None:
    from sitecal.errors import DataError

    with pytest.raises(DataError, match="--dask-workers 0"):
        Placement(n_workers=0)
    with pytest.raises(DataError, match="--shard-size 0"):
        Placement(n_workers=1, shard_size=0)
    assert "paths" not in repr(_job_repr())


def test_cli_refuses_both_placements(cohort: dict, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(cohort["root"] / "x.csv")
    code = main(
        ["predict", str(cohort["protocol"]), "--output", out, "--dask-workers", "2", "--scheduler", "x"]
    )
    assert code == 2 and "not both" in capsys.readouterr().err
    assert main(["predict", str(cohort["protocol"]), "--output", out, "--shard-size", "8"]) == 2
    assert "--shard-size needs" in capsys.readouterr().err


def test_an_unreachable_scheduler_is_bad_input(cohort: dict, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(cohort["root"] / "x.csv")
    where = ["--scheduler", "tcp://127.0.0.1:9", "--shard-size", "8"]
    code = main(["predict", str(cohort["protocol"]), "--output", out, "--no-progress", *where])
    assert code == 2
    assert "no Dask scheduler answered" in capsys.readouterr().err


def _job_repr() -> str:
    from sitecal.inference._precision import PrecisionCheck
    from sitecal.protocol import InputSettings, ModelSettings

    job = _sharded.ShardJob(
        index=3,
        positions=(1, 2),
        items=("/data/DOE^JANE/1.dcm", "/data/DOE^JANE/2.dcm"),
        model=ModelSettings.model_construct(),
        model_path=Path("m"),
        model_sha256="0",
        inputs=InputSettings(),
        n_classes=2,
        device="cpu",
        part=Path("p"),
        signature="s",
        batch_size=4,
        precision_check=PrecisionCheck(),
    )
    text = repr(job)
    assert text == "ShardJob(shard 3, 2 studies)" and "DOE" not in text
    return text


def _same(a: object, b: Part) -> bool:
    assert isinstance(a, Part)
    return (
        np.array_equal(a.positions, b.positions)
        and np.array_equal(a.logits, b.logits)
        and (a.failures, a.errors, a.n_model_failed, a.n_non_finite)
        == (b.failures, b.errors, b.n_model_failed, b.n_non_finite)
    )


def test_parts_left_by_a_killed_run_are_taken_and_no_cluster_is_started(tmp_path: Path) -> None:
    from sitecal.inference._precision import PrecisionCheck
    from sitecal.protocol import InputSettings, ModelSettings

    inputs = InputSettings(batch_size=2)
    settings = ModelSettings.model_construct(name="m")
    items = [tmp_path / f"{i}.dcm" for i in range(5)]
    keys = [f"k{i}" for i in range(5)]
    common = {
        "items": items,
        "keys": keys,
        "model": settings,
        "model_path": Path("m"),
        "model_sha256": "0",
        "inputs": inputs,
        "n_classes": 2,
        "device": "cpu",
        "parts_dir": tmp_path / "parts",
        "identity_sha256": "id",
        "batch_size": 2,
        "precision_check": PrecisionCheck(),
    }
    for index, positions in enumerate([[0, 1], [2, 3], [4]]):
        job = _sharded._job(index, positions, **common)
        logits = np.array([[float(i), -float(i)] for i in positions], np.float32)
        part = Part(np.array(positions), logits, (), (), 0, 0)
        write_part(job.part, part, job.signature)
    common.pop("parts_dir"), common.pop("batch_size"), common.pop("precision_check")
    merged = _sharded.predict_sharded(
        **common,
        cache=None,
        parts_dir=tmp_path / "parts",
        placement=Placement(scheduler="tcp://0.0.0.0:1", shard_size=2),
        batch_size=2,
        precision_check=PrecisionCheck(),
        progress=False,
    )  # a cluster asked for would fail: the address answers nobody
    assert merged.ok.tolist() == [0, 1, 2, 3, 4]
    assert merged.logits[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert not (tmp_path / "parts").exists()  # merged, then removed
