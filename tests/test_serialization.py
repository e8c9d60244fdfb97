"""save/load in PyTorch's checkpoint format both ways, without torch and without running code; safetensors;
broken and hostile files; optimizer state continuing torch's trajectory."""
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from collections import Counter, OrderedDict

import numpy as np
import pytest
import safetensors.torch
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.optim as optim
import dynajax.serialization as ser
from helpers import assert_close


def torch_bytes(obj, **kw) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


def dj_bytes(obj) -> bytes:
    buf = io.BytesIO()
    dj.save(obj, buf)
    return buf.getvalue()


def rezip(data: bytes, edit=lambda name, raw: raw, drop=()) -> bytes:
    """``data``'s archive rewritten with each entry's bytes passed through ``edit`` (entries in ``drop``
    left out)."""
    src, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in src.namelist():
            if name not in drop:
                z.writestr(name, edit(name, src.read(name)))
    return out.getvalue()


def archive(pkl: bytes, storages=None) -> bytes:
    """A torch.save-shaped archive around the pickle ``pkl``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        for key, raw in (storages or {}).items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", "3\n")
    return out.getvalue()


def same_values(got, want):
    """``got`` (dynajax's) equals ``want`` (torch's), recursively: tensors by dtype, shape and values."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, dj.Tensor) and got.dtype.name == str(want.dtype)[6:], (got, want)
        assert isinstance(got, nn.Parameter) == isinstance(want, torch.nn.Parameter)
        assert got.requires_grad == want.requires_grad
        assert_close(got, want.detach(), rtol=0, atol=0)
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want)
        for k in want:
            same_values(got[k], want[k])
    elif isinstance(want, (list, tuple)) and not isinstance(want, torch.Size):
        assert type(got) is type(want) and len(got) == len(want)
        for a, b in zip(got, want):
            same_values(a, b)
    elif isinstance(want, torch.dtype):
        assert got is getattr(dj, str(want)[6:])
    elif isinstance(want, torch.device):
        assert isinstance(got, dj.device) and str(got) == str(want)
    else:
        assert got == want and type(got).__name__ == type(want).__name__, (got, want)


def torch_checkpoint():
    base = torch.arange(24.0).reshape(4, 6)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    return {"model": model.state_dict(), "param": torch.nn.Parameter(torch.randn(2, 3)),
            "frozen": torch.nn.Parameter(torch.ones(2), requires_grad=False),
            "base": base, "rows": base[1:3], "cols": base[:, 2:5], "t": base.t(), "strided": base[::2, ::3],
            "expanded": torch.tensor([1.0, 2.0]).expand(3, 2),
            "bf16": torch.randn(5).bfloat16(), "f16": torch.randn(2, 2).half(), "f64": torch.randn(3).double(),
            "i64": torch.arange(4), "i32": torch.arange(3, dtype=torch.int32),
            "i8": torch.tensor([-3], dtype=torch.int8),
            "u8": torch.tensor([200], dtype=torch.uint8), "bool": torch.tensor([True, False]),
            "c64": torch.tensor([1 + 2j]), "scalar": torch.tensor(3.5), "empty": torch.zeros(0, 3),
            "grad": torch.ones(2, requires_grad=True),
            "size": torch.Size([2, 3]), "dtype": torch.bfloat16, "device": torch.device("cpu"),
            "nested": [1, 2.5, "s", None, True, (1, (2, [3])), {"k": [torch.ones(1)]}], "od": OrderedDict(b=1, a=2),
            "bytes": b"\x00\xff", "set": {1, 2}, "complex": 1 - 2j, "counter": Counter("aab"), "big": 2 ** 80}


# ------------------------------------------------------------------------------------------- both ways
def test_torch_save_loads_into_dynajax(tmp_path):
    ck = torch_checkpoint()
    torch.save(ck, tmp_path / "t.pt")
    back = dj.load(tmp_path / "t.pt")
    same_values(back, ck)
    assert back["model"]._metadata == ck["model"]._metadata   # (OrderedDict attributes, via BUILD)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    m.load_state_dict(back["model"])
    assert_close(m[0].weight, ck["model"]["0.weight"])
    # a file object, a big-endian archive and a pickle of protocol 4 too
    ck4 = {"w": torch.arange(6.0).reshape(2, 3), "n": [1, "x"]}
    same_values(dj.load(io.BytesIO(torch_bytes(ck4, pickle_protocol=4))), ck4)
    swapped = rezip(torch_bytes(ck4), lambda n, raw: b"big" if n.endswith("byteorder") else
                    np.frombuffer(raw, "<f4").astype(">f4").tobytes() if "/data/" in n else raw)
    same_values(dj.load(io.BytesIO(swapped)), ck4)
    # a tensor with Python attributes comes through _rebuild_from_type_v2 / _rebuild_parameter_with_state
    t, p = torch.ones(2), torch.nn.Parameter(torch.ones(1))
    t.foo, p.tag = 1, "x"
    with pytest.warns(UserWarning) as record:
        back = dj.load(io.BytesIO(torch_bytes({"t": t, "p": p})))
    assert [str(w.message) for w in record] == [f"dynajax.load: a tensor's Python attributes {a} in the checkpoint "
                                                "are not restored" for a in (["foo"], ["tag"])]
    same_values(back, {"t": t, "p": p})


def test_dynajax_save_loads_into_torch(tmp_path):
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    opt = optim.Adam(m.parameters(), lr=0.01)
    m(dj.randn(5, 3)).sum().backward()
    opt.step()
    x = dj.arange(12.0).reshape(3, 4)
    ck = {"model": m.state_dict(), "opt": opt.state_dict(), "epoch": 3, "loss": 0.25, "name": "run",
          "tags": ("a", 1, None, 2.5, (3,)), "arr": np.arange(3), "dtype": dj.float64, "shape": dj.Size([2, 3]),
          "half": dj.ones(2, dtype=dj.bfloat16), "f16": dj.full((2,), 0.5, dtype=dj.float16),
          "param": nn.Parameter(dj.ones(2)), "frozen": nn.Parameter(dj.ones(1), requires_grad=False),
          "view": x[1:, 2:], "x": x, "again": x, "bool": dj.tensor([True, False]), "i32": dj.arange(3, dtype=dj.int32),
          "c": dj.tensor([1 + 1j]), "bytes": b"ab", "set": {4}, "counter": Counter("xxy"), "big": -2 ** 90,
          "device": dj.device("cpu"), "empty": {}, "long_list": list(range(1500))}
    dj.save(ck, tmp_path / "d.pt")
    t = torch.load(tmp_path / "d.pt", weights_only=True)
    assert t["again"] is t["x"]                                  # one object saved once
    assert isinstance(t["param"], torch.nn.Parameter) and t["param"].requires_grad
    assert not t["frozen"].requires_grad and t["half"].dtype == torch.bfloat16 and t["f16"].dtype == torch.float16
    assert t["shape"] == torch.Size([2, 3]) and t["dtype"] is torch.float64 and t["device"] == torch.device("cpu")
    assert t["arr"].dtype == torch.int64 and t["arr"].tolist() == [0, 1, 2]   # numpy arrays are saved as tensors
    assert t["tags"] == ("a", 1, None, 2.5, (3,)) and t["long_list"] == list(range(1500))
    assert (t["bytes"], t["set"], t["counter"], t["big"]) == (b"ab", {4}, Counter("xxy"), -2 ** 90)
    assert list(t["opt"]["state"]) == [0, 1, 2, 3] and t["opt"]["param_groups"][0]["betas"] == (0.9, 0.999)
    for k in ("view", "x", "bool", "i32", "c", "half"):
        assert_close(ck[k], t[k])
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    tm.load_state_dict(t["model"])
    tm.eval(), m.eval()
    xin = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    assert_close(m(dj.tensor(xin)), tm(torch.tensor(xin)).detach())
    # and back into dynajax, mmap'ed by torch too (storages start 64-byte aligned, as torch writes them)
    back = dj.load(tmp_path / "d.pt")
    assert back["again"] is back["x"] and back["tags"] == ck["tags"] and isinstance(back["param"], nn.Parameter)
    assert_close(back["view"], ck["view"])
    torch.load(tmp_path / "d.pt", weights_only=True, mmap=True)
    z = zipfile.ZipFile(tmp_path / "d.pt")
    with open(tmp_path / "d.pt", "rb") as fh:
        for info in z.infolist():
            fh.seek(info.header_offset + 26)
            n, e = np.frombuffer(fh.read(4), "<u2")
            assert (info.header_offset + 30 + n + e) % 64 == 0, info.filename
    with pytest.raises(TypeError, match="cannot save an object of type Linear"):
        dj.save({"m": nn.Linear(1, 1)}, tmp_path / "no.pt")
    assert not (tmp_path / "no.pt").exists()   # nothing half-written


def test_torch_tensors_save_through_dynajax(tmp_path):
    t = torch.nn.Linear(3, 2)
    dj.save({"sd": t.state_dict(), "p": t.weight, "bf": torch.ones(2, dtype=torch.bfloat16), "dt": torch.float16,
             "size": torch.Size([1]), "dev": torch.device("cpu")}, tmp_path / "t.pt")
    back = dj.load(tmp_path / "t.pt")
    m = nn.Linear(3, 2)
    m.load_state_dict(back["sd"])
    assert_close(m.weight, t.weight.detach())
    assert isinstance(back["p"], nn.Parameter) and back["bf"].dtype == dj.bfloat16 and back["dt"] is dj.float16
    assert back["size"] == (1,) and isinstance(back["size"], dj.Size) and str(back["dev"]) == "cpu"


def test_load_needs_no_torch(tmp_path):
    """dj.load of a torch file in a process where ``import torch`` fails."""
    torch.save({"w": torch.arange(6.0).reshape(2, 3)[:, 1:], "p": torch.nn.Parameter(torch.ones(2)),
                "b": torch.ones(2, dtype=torch.bfloat16)}, tmp_path / "t.pt")
    code = ("import sys; sys.modules['torch'] = None\n"
            "import dynajax as dj\n"
            f"ck = dj.load({str(tmp_path / 't.pt')!r})\n"
            "assert sys.modules['torch'] is None\n"
            "print(ck['w'].tolist(), type(ck['p']).__name__, ck['b'].dtype)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "[[1.0, 2.0], [4.0, 5.0]] Parameter dynajax.bfloat16"


def test_map_location(tmp_path):
    data = torch_bytes({"w": torch.ones(2)})
    on_gpu = rezip(data, lambda n, raw: raw.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
                   if n.endswith("data.pkl") else raw)
    for ml in ("cpu", dj.device("cpu"), torch.device("cpu"), {"cuda:0": "cpu"}, lambda storage, loc: storage,
               lambda storage, loc: storage.cpu()):
        w = dj.load(io.BytesIO(on_gpu), map_location=ml)["w"]
        assert str(w.device) == "cpu" and w.tolist() == [1.0, 1.0]
    if not (dj.cuda.is_available() or torch.cuda.is_available()):   # torch's own error on a CPU-only machine
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device") as t_err:
            torch.load(io.BytesIO(on_gpu), weights_only=True)
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device") as d_err:
            dj.load(io.BytesIO(on_gpu))
        assert type(d_err.value) is type(t_err.value)
    with pytest.raises(TypeError, match="map_location"):
        dj.load(io.BytesIO(data), map_location=3)


def test_earlier_dynajax_format_still_loads():
    out = io.BytesIO()
    structure = {"__dict__": [["w", {"__tensor__": 0, "dtype": "bfloat16", "requires_grad": False, "parameter": True}],
                              ["arr", {"__ndarray__": 1}], ["same", {"__ref__": 0}], ["dt", {"__dtype__": "int32"}],
                              ["t", {"__tuple__": [1, {"__size__": [2]}]}]]}
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("format", "dynajax.save/1")
        z.writestr("structure.json", json.dumps(structure))
        for i, a in enumerate([np.ones(2, np.float32).astype(dj.bfloat16.np).view(np.uint16), np.arange(3)]):
            buf = io.BytesIO()
            np.save(buf, a)
            z.writestr(f"arrays/{i}.npy", buf.getvalue())
    back = dj.load(io.BytesIO(out.getvalue()))
    assert isinstance(back["w"], nn.Parameter) and back["w"].dtype == dj.bfloat16 and back["same"] is back["w"]
    assert back["arr"].tolist() == [0, 1, 2] and back["dt"] is dj.int32 and back["t"] == (1, (2,))


# ------------------------------------------------------------------------------------------- optimizer
def test_torch_adam_checkpoint_continues_in_dynajax(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 1)).astype(np.float32)

    def steps(lib, model, opt, n):
        for _ in range(n):
            opt.zero_grad()
            loss = ((model(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
            loss.backward()
            opt.step()

    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 1)
    topt = torch.optim.Adam(tm.parameters(), lr=0.05, betas=(0.8, 0.99), weight_decay=0.01)
    steps(torch, tm, topt, 3)
    torch.save({"model": tm.state_dict(), "opt": topt.state_dict()}, tmp_path / "ck.pt")
    steps(torch, tm, topt, 3)

    ck = dj.load(tmp_path / "ck.pt")
    m = nn.Linear(3, 1)
    m.load_state_dict(ck["model"])
    opt = optim.Adam(m.parameters(), lr=1.0)
    opt.load_state_dict(ck["opt"])
    assert opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[0]["betas"] == (0.8, 0.99)
    steps(dj, m, opt, 3)
    for a, b in zip(m.parameters(), tm.parameters()):
        assert_close(a, b.detach(), rtol=1e-6, atol=1e-6)
    assert_close(opt.state[m.weight]["step"], torch.tensor(6.0))
    assert_close(opt.state[m.weight]["exp_avg_sq"], topt.state[tm.weight]["exp_avg_sq"], rtol=1e-6, atol=1e-9)


def test_optimizer_load_state_dict_checks_as_torch():
    def attempt(lib, o, make, sd_of):
        p = [lib.ones(3, requires_grad=True), lib.ones(2, requires_grad=True)]
        adam = o.Adam(p)
        (p[0].sum() + p[1].sum()).backward()
        adam.step()
        opt = make(o, p)
        try:
            opt.load_state_dict(sd_of(adam.state_dict()))
            opt.step()
            return "ok", sorted(opt.param_groups[0])
        except Exception as e:   # noqa: BLE001 (the outcome is compared with torch's)
            return type(e).__name__, str(e)

    cases = [(lambda o, p: o.SGD(p, lr=0.1), lambda sd: sd),   # loads, then SGD's step misses 'momentum'
             (lambda o, p: o.SGD(p[:1], lr=0.1), lambda sd: sd),
             (lambda o, p: o.SGD([{"params": p[:1]}, {"params": p[1:]}], lr=0.1), lambda sd: sd),
             (lambda o, p: o.Adam(p), lambda sd: {"state": sd["state"]}),
             (lambda o, p: o.Adam(p), lambda sd: {"param_groups": sd["param_groups"]}),
             (lambda o, p: o.AdamW(p), lambda sd: sd)]
    for make, sd_of in cases:
        assert attempt(dj, dj.optim, make, sd_of) == attempt(torch, torch.optim, make, sd_of)


# ------------------------------------------------------------------------------------------- hostile files
class _Payload:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


@pytest.mark.filterwarnings("ignore:Detected pickle protocol 4:UserWarning")   # (torch.load's, side by side)
def test_hostile_pickles_are_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    touch = f"open({str(marker)!r}, 'w').close()"
    payloads = {
        r"(os|posix)\.system.*blocked": {"w": _Payload(os.system, f"touch {marker}")},
        r"builtins\.eval": [1, _Payload(eval, touch)],
        # a refused call nested in the arguments of allowed ones (OrderedDict of a list holding it)
        r"builtins\.exec": _Payload(OrderedDict, [("k", _Payload(exec, touch))]),
        r"builtins\.getattr": _Payload(getattr, _Payload(__import__, "os"), "system"),
    }
    for name, obj in payloads.items():
        for proto in (2, 4):
            data = archive(pickle.dumps(obj, protocol=proto))
            with pytest.raises(pickle.UnpicklingError, match=name):
                dj.load(io.BytesIO(data))
            with pytest.raises(pickle.UnpicklingError):   # torch refuses it too, with the same type
                torch.load(io.BytesIO(data), weights_only=True)
            assert not marker.exists()
    pickle.loads(pickle.dumps(payloads[r"builtins\.exec"]))   # (the marker does show a payload that ran)
    assert marker.exists()
    # a whole module: its class is a torch global that weights_only refuses
    data = torch_bytes(torch.nn.Linear(2, 2))
    with pytest.raises(pickle.UnpicklingError, match=r"GLOBAL torch\.nn\.modules\.linear\.Linear"):
        dj.load(io.BytesIO(data))
    with pytest.raises(pickle.UnpicklingError, match=r"torch\.nn\.modules\.linear\.Linear"):
        torch.load(io.BytesIO(data), weights_only=True)
    # a global torch allows but dynajax has no counterpart for
    with pytest.raises(pickle.UnpicklingError, match="uint16"):
        dj.load(io.BytesIO(torch_bytes({"u": torch.zeros(2, dtype=torch.uint16)})))


def crafted(body: bytes, storages=None) -> bytes:
    return archive(b"\x80\x02" + body + b".", storages)


def test_crafted_pickles_raise_clear_errors():
    storage = (b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQ")

    def tensor(offset, size, stride):
        return (b"ctorch._utils\n_rebuild_tensor_v2\n" + storage + offset + size + stride
                + b"\x89ccollections\nOrderedDict\n)Rt" + b"R")
    two_floats = {"0": np.array([1.0, 2.0], np.float32).tobytes()}
    assert dj.load(io.BytesIO(crafted(tensor(b"K\x01", b"K\x01\x85", b"K\x01\x85"), two_floats))).tolist() == [2.0]
    cases = {
        "reaches element": crafted(tensor(b"K\x00", b"K\x64\x85", b"K\x01\x85"), two_floats),   # 100 of 2
        "ints >= 0": crafted(tensor(b"K\x01", b"K\x02\x85", b"J\xff\xff\xff\xff\x85"), two_floats),
        "more than 2 GiB": crafted(tensor(b"K\x00", b"J\xff\xff\xff\x7f\x85", b"K\x00\x85"), two_floats),
        "never stored": crafted(b"h\x05"),
        "malformed": crafted(b"R"),
        "nests tuples": crafted(b"}" + b")" + b"\x85" * 5000 + b"Ns"),
        "Unsupported operand": crafted(b"I1\n"),
        "Can only SETITEM": crafted(b"]K\x01K\x02s"),
        "Can only build": crafted(b"]}b"),
        "persistent_load of storage": crafted(b"X\x01\x00\x00\x00xQ"),
        "ends inside": archive(b"\x80\x02X\xff\x00\x00\x00ab"),
        "Trying to call reduce": crafted(b"K\x01)R"),
    }
    for what, data in cases.items():
        with pytest.raises(pickle.UnpicklingError, match=what):
            dj.load(io.BytesIO(data))
    with pytest.raises(RuntimeError, match="lacks"):
        dj.load(io.BytesIO(crafted(tensor(b"K\x00", b"K\x01\x85", b"K\x01\x85"))))
    with pytest.raises(RuntimeError, match="holds 4 bytes"):
        dj.load(io.BytesIO(crafted(tensor(b"K\x00", b"K\x01\x85", b"K\x01\x85"), {"0": b"\0" * 4})))


def test_broken_files(tmp_path):
    data = dj_bytes({"w": dj.randn(64, 64), "b": dj.arange(10)})
    for cut in (0.5, 0.99):
        with pytest.raises(RuntimeError, match="truncated"):
            dj.load(io.BytesIO(data[:int(len(data) * cut)]))
    with pytest.raises(Exception):   # (torch fails too, with ValueError/OSError saying nothing of the cause)
        torch.load(io.BytesIO(data[:len(data) // 2]), weights_only=True)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("archive/data/0")
    start = info.header_offset + 30 + int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little") \
        + int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    flipped = bytearray(data)
    flipped[start + 100] ^= 0xFF
    with pytest.raises(RuntimeError, match="corrupted: entry 'archive/data/0'"):
        dj.load(io.BytesIO(bytes(flipped)))
    torch.load(io.BytesIO(bytes(flipped)), weights_only=True)   # (torch does not check the CRC: wrong values)
    for junk, exc, what in ((b"", EOFError, "empty"), (b"hello, this is text", pickle.UnpicklingError,
                                                       "not a checkpoint"),
                            (torch_bytes({"w": torch.ones(1)}, _use_new_zipfile_serialization=False), RuntimeError,
                             "before 1.6"),
                            (pickle.dumps({"a": 1}, protocol=2), pickle.UnpicklingError, "not a checkpoint")):
        with pytest.raises(exc, match=what):
            dj.load(io.BytesIO(junk))
    with pytest.raises(EOFError):
        torch.load(io.BytesIO(b""), weights_only=True)
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("a/b.txt", "hi")
    with pytest.raises(RuntimeError, match="no data.pkl"):
        dj.load(io.BytesIO(other.getvalue()))
    ts = io.BytesIO(archive(pickle.dumps({}, protocol=2)))
    with zipfile.ZipFile(ts, "a") as z:
        z.writestr("archive/constants.pkl", b"")
    with pytest.raises(RuntimeError, match="TorchScript"):
        dj.load(io.BytesIO(ts.getvalue()))


# ------------------------------------------------------------------------------------------- safetensors
def test_safetensors_round_trips(tmp_path):
    tensors = {"w": dj.randn(3, 4), "bf": dj.randn(5).to(dj.bfloat16), "h": dj.ones(2, dtype=dj.float16),
               "i": dj.arange(4), "b": dj.tensor([True, False]), "u8": dj.tensor([7], dtype=dj.uint8),
               "c": dj.tensor([1 + 2j], dtype=dj.complex64), "s": dj.tensor(2.5)}
    dj.save_safetensors(tensors, tmp_path / "d.safetensors", metadata={"format": "pt"})
    t = safetensors.torch.load_file(tmp_path / "d.safetensors")   # the real reader
    for back in (dj.load_safetensors(tmp_path / "d.safetensors"), dj.load(tmp_path / "d.safetensors"),
                 dj.load_safetensors(tmp_path / "d.safetensors", map_location="cpu")):
        assert list(back) == list(t)   # (its order: the data's in the file)
        for k, v in tensors.items():
            assert back[k].dtype == v.dtype and back[k].shape == v.shape
            assert_close(back[k], v, rtol=0, atol=0)
    for k, v in tensors.items():
        assert_close(v, t[k], rtol=0, atol=0)
    ref = {"w": torch.randn(2, 3), "bf": torch.randn(4).bfloat16(), "i": torch.arange(3, dtype=torch.int32)}
    safetensors.torch.save_file(ref, tmp_path / "t.safetensors")
    ref = safetensors.torch.load_file(tmp_path / "t.safetensors")
    same_values(dj.load_safetensors(tmp_path / "t.safetensors"), ref)
    with open(tmp_path / "t.safetensors", "rb") as fh:
        same_values(dj.load(fh), ref)


def test_safetensors_errors(tmp_path, monkeypatch):
    x = dj.ones(3)
    with pytest.raises(RuntimeError, match="share memory"):
        dj.save_safetensors({"a": x, "b": x}, tmp_path / "s.safetensors")
    with pytest.raises(ValueError, match="Key `a` is invalid"):
        dj.save_safetensors({"a": 1}, tmp_path / "s.safetensors")
    with pytest.raises(TypeError, match="metadata"):
        dj.save_safetensors({"a": x}, tmp_path / "s.safetensors", metadata={"a": 1})
    dj.save_safetensors({"a": dj.randn(100)}, tmp_path / "s.safetensors")
    data = (tmp_path / "s.safetensors").read_bytes()
    for cut in (0.5, 0.99):
        with pytest.raises(RuntimeError, match="truncated"):
            dj.load(io.BytesIO(data[:int(len(data) * cut)]))
    with pytest.raises(RuntimeError, match="dict map_location is not supported"):
        dj.load_safetensors(tmp_path / "s.safetensors", map_location={"cpu": "cpu"})
    monkeypatch.setattr(ser, "_st", None)
    with pytest.raises(ImportError, match=r"pip install 'dynajax\[safetensors\]'"):
        dj.load_safetensors(tmp_path / "s.safetensors")
    with pytest.raises(ImportError, match="safetensors package"):
        dj.save_safetensors({"a": x}, tmp_path / "s2.safetensors")
