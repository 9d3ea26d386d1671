"""The example notebook, executed in a real Jupyter kernel."""

import shutil

import pytest

from tests.helpers import REPO


@pytest.mark.integration
def test_the_example_notebook_runs_and_shows_progress_as_a_table_not_lines(tmp_path, data_dir,
                                                                           monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for name in ("python-api.ipynb", "quick.toml"):
        shutil.copy(REPO / "examples" / name, tmp_path / name)
    notebook = nbformat.read(tmp_path / "python-api.ipynb", as_version=4)
    monkeypatch.setenv("PROTOFED_DATA_DIR", str(data_dir))
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [out for cell in notebook.cells if cell.cell_type == "code"
               for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    streamed = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert "round 1/2" not in streamed  # no progress lines: the table below
    tables = [out for out in outputs if out.output_type == "display_data"
              and "<progress" in out.get("data", {}).get("text/html", "")]
    assert tables, "no progress table was displayed"
    assert "finished" in streamed  # the end table printed by run.table()
    assert len(list((tmp_path / "results").iterdir())) == 3  # the run and the sweep's two
