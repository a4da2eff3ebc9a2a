"""The cluster model's JSON inputs (--nccl-table, --calibration) go through the project's strict reader."""

from __future__ import annotations

import pytest

from protocol.cluster.nccl import load_table
from protocol.cluster.ncclfile import read_calibration


@pytest.mark.parametrize("reader", [load_table, read_calibration])
def test_deep_json_and_folders_are_value_errors_naming_the_file(tmp_path, reader):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)  # json.load alone: RecursionError
    with pytest.raises(ValueError, match="deep.json: JSON nested deeper"):
        reader(deep)
    with pytest.raises(ValueError, match="is a folder"):
        reader(tmp_path)
    with pytest.raises(ValueError, match="missing.json: cannot read"):
        reader(tmp_path / "missing.json")
