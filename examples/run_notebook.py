"""Run a notebook to its end in the current folder, with this interpreter's Jupyter kernel (so the nplm it
imports is this environment's), and print its last cell's output: `python examples/run_notebook.py NOTEBOOK`.
`make wheel-check` runs examples/quickstart.ipynb this way with the installed wheel."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(path: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(Path.cwd())}}).execute()
    last = [cell for cell in notebook.cells if cell.cell_type == "code"][-1]
    print("".join(out.get("text", "") for out in last.outputs).strip())


if __name__ == "__main__":
    main(sys.argv[1])
