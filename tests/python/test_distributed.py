"""sdpa.distributed over torch.distributed (gloo) with 2 and 3 ranks, started by torchrun:
dist_worker.py checks every rank's shard of the output and the gradients against single-process
attention in float64 within the merge's bound (docs/scaling.md)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="PyTorch is not importable: sdpa.distributed needs torch.distributed")


@pytest.mark.parametrize("ranks", [2, 3])
def test_ring_attention_under_torchrun(ranks, tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "dist_worker.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # torchrun as a module of this interpreter: the venv's torch and sdpa; a timeout so a hang fails.
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                        worker], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, f"torchrun exited {r.returncode}\nstdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}"
    assert f"dist_worker: {ranks} ranks" in r.stdout
