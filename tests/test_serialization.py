"""Saving and loading `neuron` tensors: torch.save/torch.load (map_location neuron,
cpu, or as saved) with shared storages preserved, and safetensors (load_file straight
onto neuron, save_model/load_model with tied weights)."""
import io

import pytest
import safetensors
import safetensors.torch as st
import torch

from helpers import TiedModel

NEURON = torch.device("neuron", 0)


def _state():
    base = torch.arange(12.0, device="neuron")
    return {
        "base": base,
        "rows": base.view(3, 4)[1:],  # a view: shares base's storage
        "cols": base.view(3, 4).t(),
        "big": torch.tensor([2**60 + 1, -(2**62)], device="neuron"),
        "half": torch.tensor([1.5, -2.25], dtype=torch.bfloat16, device="neuron"),
        "flags": torch.tensor([True, False], device="neuron"),
        "f64": torch.tensor([1 + 2**-40], dtype=torch.float64, device="neuron"),
    }


def _saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("map_location", ["neuron", "cpu", None, NEURON])
def test_torch_save_load_keeps_values_views_and_sharing(map_location):
    state = _state()
    loaded = torch.load(_saved(state), map_location=map_location)
    expected_type = "cpu" if map_location == "cpu" else "neuron"
    for name, t in state.items():
        got = loaded[name]
        assert got.device.type == expected_type, name
        assert got.dtype == t.dtype and got.shape == t.shape and got.stride() == t.stride()
        assert got.storage_offset() == t.storage_offset()
        assert torch.equal(got.cpu(), t.cpu()), name
    ptr = loaded["base"].untyped_storage().data_ptr()
    assert loaded["rows"].untyped_storage().data_ptr() == ptr
    assert loaded["cols"].untyped_storage().data_ptr() == ptr
    loaded["base"].add_(100)  # writes through the shared storage
    assert torch.equal(loaded["rows"].cpu(), state["rows"].cpu() + 100)
    assert loaded["big"][0].item() == 2**60 + 1


def test_load_cpu_checkpoint_onto_neuron():
    cpu = {"w": torch.randn(3, 4), "v": torch.arange(5)}
    cpu["wt"] = cpu["w"].t()
    loaded = torch.load(_saved(cpu), map_location="neuron")
    assert all(t.device == NEURON for t in loaded.values())
    assert torch.equal(loaded["wt"].cpu(), cpu["wt"])
    assert loaded["wt"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()


def test_model_state_dict_round_trip_and_load_state_dict():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2)).to("neuron")
    sd = model.state_dict()
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2)).to("neuron")
    fresh.load_state_dict(torch.load(_saved(sd), map_location="neuron"))
    x = torch.randn(5, 4)
    torch.testing.assert_close(fresh(x.to("neuron")).cpu(), model(x.to("neuron")).cpu())
    # a CPU model loads a neuron checkpoint with map_location="cpu"
    cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    cpu_model.load_state_dict(torch.load(_saved(sd), map_location="cpu"))
    torch.testing.assert_close(cpu_model(x), model(x.to("neuron")).cpu(), atol=1e-5, rtol=1e-5)


def test_optimizer_state_round_trip():
    """An optimizer resumed from a checkpoint takes the same next step as the original."""
    import copy

    model = torch.nn.Linear(3, 2).to("neuron")
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(4, 3, device="neuron")
    model(x).sum().backward()
    opt.step()
    resumed_model = copy.deepcopy(model)
    resumed = torch.optim.Adam(resumed_model.parameters(), lr=0.1)
    resumed.load_state_dict(torch.load(_saved(opt.state_dict()), map_location="neuron"))
    for m, o in ((model, opt), (resumed_model, resumed)):
        o.zero_grad()
        (m(x) ** 2).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), resumed_model.parameters()):
        assert torch.equal(a.detach().cpu(), b.detach().cpu())


def test_safetensors_save_file_load_file_onto_neuron(tmp_path):
    tensors = {"a": torch.arange(6.0, device="neuron").reshape(2, 3), "b": torch.tensor([2**60 + 3], device="neuron"),
               "c": torch.tensor([0.5, -1.25], dtype=torch.bfloat16, device="neuron"),
               "d": torch.tensor([True, False], device="neuron")}
    path = str(tmp_path / "t.safetensors")
    st.save_file(tensors, path)
    for device in ("neuron", "neuron:0", NEURON):
        loaded = st.load_file(path, device=device)
        assert set(loaded) == set(tensors)
        for name, t in tensors.items():
            assert loaded[name].device == NEURON and loaded[name].dtype == t.dtype
            assert torch.equal(loaded[name].cpu(), t.cpu())
    on_cpu = st.load_file(path)
    assert on_cpu["a"].device.type == "cpu" and torch.equal(on_cpu["a"], tensors["a"].cpu())


def test_safetensors_safe_open_on_neuron(tmp_path):
    path = str(tmp_path / "t.safetensors")
    st.save_file({"w": torch.arange(12.0).reshape(3, 4)}, path, metadata={"format": "pt"})
    with safetensors.safe_open(path, framework="pt", device="neuron") as f:
        assert list(f.keys()) == ["w"]
        assert f.metadata() == {"format": "pt"}
        w = f.get_tensor("w")
        part = f.get_slice("w")[1:, :2]
        assert f.get_slice("w").get_shape() == [3, 4]
    assert w.device == NEURON and torch.equal(w.cpu(), torch.arange(12.0).reshape(3, 4))
    assert part.device == NEURON and torch.equal(part.cpu(), torch.arange(12.0).reshape(3, 4)[1:, :2])
    with pytest.raises(Exception, match="invalid"):
        safetensors.safe_open(path, framework="pt", device="nonsense")



def test_safetensors_model_with_tied_weights(tmp_path):
    model = TiedModel().to("neuron")
    path = str(tmp_path / "m.safetensors")
    with pytest.raises(RuntimeError, match="share memory"):
        st.save_file(model.state_dict(), path)  # shared tensors are detected by data_ptr
    st.save_model(model, path)
    with safetensors.safe_open(path, framework="pt") as f:
        assert len(list(f.keys())) == 1  # the tie is stored once
    fresh = TiedModel().to("neuron")
    missing, unexpected = st.load_model(fresh, path)
    assert not missing and not unexpected
    assert fresh.out.weight is fresh.emb.weight
    assert torch.equal(fresh.emb.weight.detach().cpu(), model.emb.weight.detach().cpu())
    on_neuron = TiedModel()
    st.load_model(on_neuron, path, device="neuron")
    assert torch.equal(on_neuron.emb.weight.detach(), model.emb.weight.detach().cpu())
