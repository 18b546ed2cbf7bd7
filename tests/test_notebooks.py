"""The notebooks run headless (nbclient, CI settings); a failing cell fails the test.

Executing them here checks every cell, including the asserts the notebooks make on their own
results (vectorized loops present, outputs match stock TVM and the peers). They are stored either
without outputs or executed as a whole, from the repository root, with full settings:

    jupyter-execute --inplace --timeout=3600 notebooks/01_graph_meets_kernel.ipynb \
        notebooks/02_resnet.ipynb
"""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
TIMEOUT_S = 900  # per cell; a loaded 2-core machine builds ResNet-18 in about a minute


def _read(name):
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def _execute(name, monkeypatch):
    monkeypatch.setenv("CI", "1")  # the kernel inherits it: small settings
    monkeypatch.setenv("TOPHUB_LOCATION", "NONE")
    notebook = _read(name)
    client = nbclient.NotebookClient(
        notebook,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # raises CellExecutionError naming the failing cell
    return notebook


def _text(notebook) -> str:
    return "\n".join(
        out.get("text", "") + out.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )


def _images(notebook) -> int:
    return sum(
        "image/png" in out.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )


@pytest.mark.parametrize("name", ["01_graph_meets_kernel.ipynb", "02_resnet.ipynb"])
def test_notebooks_are_stored_clean_or_executed_as_a_whole(name):
    cells = [cell for cell in _read(name).cells if cell.cell_type == "code"]
    assert cells
    counts = [cell.execution_count for cell in cells]
    if all(count is None and cell.outputs == [] for count, cell in zip(counts, cells)):
        return
    assert counts == list(range(1, len(cells) + 1)), "executed in order, in one session"
    assert not [out for cell in cells for out in cell.outputs if out.output_type == "error"]
    assert "(CI settings)" not in _text(_read(name)), "executed with full settings"


def test_graph_meets_kernel_runs(monkeypatch):
    notebook = _execute("01_graph_meets_kernel.ipynb", monkeypatch)
    text = _text(notebook)
    assert "after tvm_fuse.FuseConvBiasAct" in text
    assert "epilogue:  out = max(0, acc + b)" in text
    assert "loops:     register tile" in text  # the tile model's loop nest (schedules.loop_nest)
    assert "parallel" in text and "vectorized" in text
    assert "FMA peak:" in text and "of the FMA peak measured in the same rounds" in text
    assert _images(notebook) == 1


@pytest.mark.slow
def test_resnet_runs(monkeypatch):
    notebook = _execute("02_resnet.ipynb", monkeypatch)
    text = _text(notebook)
    assert "fused kernels" in text and "ms" in text
    assert "of activation storage" in text and "x stock TVM's time" in text
    assert _images(notebook) == 1
