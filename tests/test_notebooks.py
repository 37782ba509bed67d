"""Every notebook (``notebooks/*.py``, jupytext percent format) converts to .ipynb and runs top to bottom.

Each notebook is converted with jupytext into ``tmp_path`` and executed there by nbclient with a fresh kernel,
working directory ``notebooks/`` (so it finds ``figures/data`` as a user's checkout would). The kernel inherits
this process's environment, where ``tests/conftest.py`` set ``NUMBA_ENABLE_CUDASIM=1``: the kernels run in the
simulator. Any cell error fails the test, with the cell's traceback in the message. One test per notebook, so
``pytest -n 2`` runs two at a time.
"""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
TIMEOUT_S = 300  # per cell; a notebook is meant to take well under a minute in the simulator


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    jupytext = pytest.importorskip("jupytext")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = jupytext.read(path)
    ipynb = tmp_path / (path.stem + ".ipynb")
    nbformat.write(nb, ipynb)
    nb = nbformat.read(ipynb, as_version=4)
    assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "conftest.py should have enabled the simulator"

    client = nbclient.NotebookClient(
        nb, timeout=TIMEOUT_S, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
        kernel_manager_class=_ThisPythonKernel,
    )
    try:
        client.execute()
    finally:
        nbformat.write(nb, ipynb)  # keep the executed notebook next to the failure for inspection


def _this_python_kernel():
    from jupyter_client.manager import KernelManager

    class ThisPythonKernel(KernelManager):
        """Start ipykernel with this interpreter (the test environment), whatever kernelspecs the machine has."""

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if "ipykernel_launcher" in cmd:
                cmd[0] = sys.executable
            return cmd

    return ThisPythonKernel


try:
    _ThisPythonKernel = _this_python_kernel()
except ImportError:  # jupyter_client missing: the tests skip at importorskip
    _ThisPythonKernel = None
