"""examples/quickstart.ipynb runs end to end (a Jupyter kernel, through nbclient) in a temporary folder, where
its runs land; the committed file holds no outputs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


def test_the_committed_notebook_has_no_outputs():
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)


def test_the_quickstart_notebook_runs_to_its_end(tmp_path, monkeypatch):
    """Every cell runs without an error; the last prints its marker, the table compares the two runs, the plot is
    drawn, and the runs are in the temporary folder's outputs/."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("NPLM_DATA_DIR", raising=False)  # its data_cache in the temporary folder too
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline plots
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    def text(cell) -> str:
        return "".join(out.get("text", "") + out.get("data", {}).get("text/markdown", "") for out in cell.outputs)

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert text(code[-1]).strip() == "quickstart: done (2 runs compared)"
    table = next(text(cell) for cell in code if "table = nplm.compare" in cell.source)
    assert "| hierarchical |" in table and "| softmax |" in table
    assert any("image/png" in out.get("data", {}) for cell in code for out in cell.outputs)
    assert len(list((tmp_path / "outputs" / "default" / "runs").glob("*/checkpoints/last.ckpt"))) == 2
