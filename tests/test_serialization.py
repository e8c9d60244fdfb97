"""save/load: state dicts and checkpoints round trip (zip of .npy + JSON, no pickle)."""
import io
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.optim as optim
from helpers import assert_close


def test_checkpoint_round_trip(tmp_path):
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    opt = optim.Adam(m.parameters(), lr=0.01)
    m(dj.randn(5, 3)).sum().backward()
    opt.step()
    ck = {"model": m.state_dict(), "opt": opt.state_dict(), "epoch": 3, "loss": 0.25, "name": "run",
          "tags": ("a", 1, None), "arr": np.arange(3), "dtype": dj.float64, "shape": dj.Size([2, 3]),
          "half": dj.ones(2, dtype=dj.bfloat16), "param": nn.Parameter(dj.ones(2))}
    path = tmp_path / "ck.pt"
    dj.save(ck, path)
    back = dj.load(path)
    assert isinstance(back["model"], OrderedDict) and list(back["model"]) == list(ck["model"])
    for k, v in ck["model"].items():
        assert_close(back["model"][k], v)
    assert back["epoch"] == 3 and back["loss"] == 0.25 and back["name"] == "run"
    assert back["tags"] == ("a", 1, None) and back["dtype"] is dj.float64 and back["shape"] == (2, 3)
    np.testing.assert_array_equal(back["arr"], np.arange(3))
    assert back["half"].dtype == dj.bfloat16
    assert isinstance(back["param"], nn.Parameter) and back["param"].requires_grad
    assert list(back["opt"]["state"]) == [0, 1, 2, 3]
    m2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    m2.load_state_dict(back["model"])
    o2 = optim.Adam(m2.parameters())
    o2.load_state_dict(back["opt"])
    assert o2.param_groups[0]["lr"] == 0.01
    x = dj.randn(2, 3)
    m.eval(), m2.eval()
    assert_close(m(x), m2(x))


def test_file_object_shared_tensors_and_no_pickle():
    t = dj.arange(4.0)
    buf = io.BytesIO()
    dj.save([t, t, {1: t}], buf)
    buf.seek(0)
    a, b, d = dj.load(buf)
    assert a is b and d[1] is a
    names = zipfile.ZipFile(io.BytesIO(buf.getvalue())).namelist()
    assert all(n in ("format", "structure.json") or n.endswith(".npy") for n in names)
    with pytest.raises(TypeError, match="cannot save an object of type"):
        dj.save({"m": nn.Linear(1, 1)}, io.BytesIO())
    pt = io.BytesIO()
    torch.save({"a": torch.ones(1)}, pt)
    pt.seek(0)
    with pytest.raises(RuntimeError, match="not a dynajax checkpoint"):
        dj.load(pt)


def test_torch_state_dict_saves_and_loads_into_module(tmp_path):
    t = torch.nn.Linear(3, 2)
    dj.save(t.state_dict(), tmp_path / "t.pt")
    m = nn.Linear(3, 2)
    m.load_state_dict(dj.load(tmp_path / "t.pt"))
    assert_close(m.weight, t.weight)
