"""Which models the sweep covers, and how each is built small, offline, with random weights.

transformers: every entry of `MODEL_MAPPING_NAMES` (the base model of each
architecture, as `AutoModel` would pick it). The default config of its config class is
shrunk generically through the config's own attribute names (layers, widths, heads,
vocabulary; sub-configs recursively), so nothing is downloaded. timm: every name of
`timm.list_models()`, built with `pretrained=False`, few classes, a small input and, where
the model's class takes ``depth``/``depths``, 2 blocks (or 1 per stage).

Model names are ``"<suite>/<name>"``; `build(name, seed)` returns ``(model, inputs)``
(a CPU `nn.Module` in eval mode and a dict of CPU keyword arguments).
"""
from __future__ import annotations

import inspect
import itertools

import torch

SUITES = ("transformers", "timm")

#: Integer config attributes shrunk to the value given when the default is larger.
_SMALL_INTS = {
    # depth
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2,
    "encoder_layers": 2, "decoder_layers": 2, "num_encoder_layers": 2,
    "num_decoder_layers": 2, "depth": 2,
    # width
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32,
    "hidden_dim": 32, "projection_dim": 32, "text_embed_dim": 32, "vision_embed_dim": 32,
    "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
    "n_inner": 64, "d_ff": 64, "ffn_hidden_size": 64, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64, "d_kv": 16, "head_dim": 16,
    # attention heads
    "num_attention_heads": 2, "n_head": 2, "n_heads": 2, "num_heads": 2,
    "encoder_attention_heads": 2, "decoder_attention_heads": 2,
    # experts
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "num_experts_per_token": 2,
    # vocabulary and input sizes
    "vocab_size": 256, "max_source_positions": 1500,
}

#: List-valued attributes: per-stage depths become 1, per-stage widths shrink.
_STAGE_DEPTHS = ("depths", "num_layers_per_stage", "layers_per_stage")
_STAGE_WIDTHS = ("hidden_sizes", "embed_dims", "dims", "num_channels_per_stage")

#: Model size above which a model is not built (the sweep's models must stay tiny).
MAX_PARAMS = 100_000_000

BATCH = 2
SEQ_LEN = 8
TIMM_IMAGE = 64


def model_names(suite: str = "all") -> list[str]:
    """Every model name of `suite` (``transformers``, ``timm`` or ``all``), ordered so
    that a prefix (``--limit N``) spreads over model families: the first variant of each
    family comes before the second of any."""
    if suite == "all":
        return [n for s in SUITES for n in model_names(s)]
    if suite == "transformers":
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

        names = sorted(MODEL_MAPPING_NAMES)
        # A family shares the first word of its model type (e.g. "qwen2", "qwen2_moe").
        return [f"transformers/{n}" for n in _spread(names, lambda n: n.split("_")[0])]
    if suite == "timm":
        import timm

        names = sorted(timm.list_models(), key=lambda n: (_size_rank(n), n))
        return [f"timm/{n}" for n in _spread(names, lambda n: n.split("_")[0].rstrip("0123456789"))]
    raise ValueError(f"unknown suite {suite!r}; expected one of {SUITES + ('all',)}")


#: timm's size words, smallest first; a name without one ranks in the middle.
_SIZES = ("atto", "femto", "pico", "nano", "tiny", "xxs", "xs", "mini", "small", "s", "",
          "medium", "m", "base", "b", "large", "l", "xl", "huge", "h", "giant", "g", "gigantic")


def _size_rank(name: str) -> int:
    """Where `name`'s size word ranks in `_SIZES`, so small variants run first."""
    words = set(name.replace(".", "_").split("_"))
    ranks = [i for i, size in enumerate(_SIZES) if size in words]
    return min(ranks) if ranks else _SIZES.index("")


def _spread(names, family):
    """Round-robin over families: the i-th member of every family before the (i+1)-th."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(family(n), []).append(n)
    rounds = itertools.zip_longest(*groups.values())
    return [n for r in rounds for n in r if n is not None]


def build(name: str, seed: int = 0):
    """Builds model `name` on the CPU with random weights from `seed`.

    Returns ``(model, candidates)``: the `nn.Module` in eval mode (dropout off, so runs
    are deterministic) and a list of dicts of CPU keyword arguments for its forward,
    the fullest first (a caller uses the first the CPU runs). Raises
    whatever the model's own constructor raises, and `ValueError` for a model over
    `MAX_PARAMS` parameters.
    """
    suite, _, model = name.partition("/")
    torch.manual_seed(seed)
    if suite == "transformers":
        m, inputs = _build_transformers(model)
    elif suite == "timm":
        m, inputs = _build_timm(model)
    else:
        raise ValueError(f"unknown suite in model name {name!r}")
    _break_ties(m)
    return m.eval(), inputs


@torch.no_grad()
def _break_ties(model) -> None:
    """Adds small seeded noise to every constant parameter (zero-initialized router
    gates, ones of norms). A zero router makes all expert scores equal, and then which
    experts `topk` picks is an unspecified tie-break that differs between CPU kernels
    and any other device: the comparison would test the tie-break, not the model."""
    for p in model.parameters():
        if p.is_floating_point() and p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
            p.add_(torch.randn_like(p), alpha=0.02)


def _count_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _check_size(make):
    """Builds on the meta device first, so a huge default never allocates memory."""
    with torch.device("meta"):
        meta = make()
    n = _count_params(meta)
    if n > MAX_PARAMS:
        raise ValueError(f"{n / 1e6:.0f}M parameters, over the sweep's {MAX_PARAMS / 1e6:.0f}M limit")


# --- transformers -------------------------------------------------------------------


def shrink_config(config) -> None:
    """Shrinks a transformers config in place through its attribute names (sub-configs
    included): depth to 2 layers, widths to 32-64, 2 heads, a 256-token vocabulary.
    Keeps each attention's head size whole and special token ids inside the vocabulary."""
    from transformers import PretrainedConfig

    for key, value in list(vars(config).items()):
        if isinstance(value, PretrainedConfig):
            shrink_config(value)
        elif isinstance(value, dict) and key.endswith("_config"):
            continue
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int) and key in _SMALL_INTS and value > _SMALL_INTS[key]:
            setattr(config, key, _SMALL_INTS[key])
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            if key in _STAGE_DEPTHS:
                setattr(config, key, type(value)(1 for _ in value))
            elif key in _STAGE_WIDTHS:
                setattr(config, key, type(value)(max(8, v // 16) for v in value))
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None)
    if isinstance(kv, int) and isinstance(heads, int):
        # Grouped-query attention stays grouped (1 key/value head) where it was.
        config.num_key_value_heads = heads if kv >= heads else 1
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for key, value in list(vars(config).items()):
            if (key.endswith("_token_id") or key.endswith("_token_index")) and isinstance(value, int) \
                    and not isinstance(value, bool) and value >= vocab:
                setattr(config, key, vocab - 1)
    if hasattr(config, "use_cache"):
        config.use_cache = False


def _build_transformers(model_type: str):
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    class_name = MODEL_MAPPING_NAMES[model_type]
    if isinstance(class_name, (list, tuple)):
        class_name = class_name[0]
    cls = getattr(transformers, class_name)
    config = CONFIG_MAPPING[model_type]()
    shrink_config(config)
    # The eager attention is the reference implementation every model has.
    config._attn_implementation = "eager"
    _check_size(lambda: cls(config))
    model = cls(config)
    return model, _transformers_inputs(model, config)


def _sub(config, *names):
    """The first of `names` found on `config` or its sub-configs."""
    for name in names:
        if getattr(config, name, None) is not None:
            return getattr(config, name)
    for value in vars(config).values():
        if hasattr(value, "to_dict") and hasattr(value, "model_type"):
            found = _sub(value, *names)
            if found is not None:
                return found
    return None


def _image_size(config):
    size = _sub(config, "image_size", "img_size", "input_size") or 224
    if isinstance(size, (list, tuple)):
        return tuple(size[-2:])
    return (size, size)


def _transformers_inputs(model, config) -> list[dict]:
    """Input candidates from the model's forward signature: its main input, plus decoder
    ids for encoder-decoder models and any other required `*input_ids`; for a model whose forward also takes images (CLIP
    style), first a candidate with both. Integer ids are drawn below the text vocabulary."""
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    vocab = _sub(config.get_text_config() if hasattr(config, "get_text_config") else config,
                 "vocab_size") or 256
    inputs = {}

    def ids():
        return torch.randint(3, max(4, min(vocab, 256)), (BATCH, SEQ_LEN))

    if main == "input_ids" or "input_ids" in params and main not in params:
        inputs["input_ids"] = ids()
    elif main == "pixel_values":
        channels = _sub(config, "num_channels", "in_channels") or 3
        inputs["pixel_values"] = torch.randn(BATCH, channels, *_image_size(config))
    elif main == "input_values":
        mels = _sub(config, "num_mel_bins")
        if mels:  # a spectrogram (frames, mel bins), e.g. the Audio Spectrogram Transformer
            frames = _sub(config, "max_length") or 128
            return [{"input_values": torch.randn(BATCH, frames, mels)}]
        inputs["input_values"] = torch.randn(BATCH, 4000)
    elif main == "input_features":
        mels = _sub(config, "num_mel_bins", "feature_size", "input_feat_per_channel") or 80
        frames = 2 * (_sub(config, "max_source_positions") or 1500)
        inputs["input_features"] = torch.randn(BATCH, mels, frames)
    elif main == "past_values":
        length = (_sub(config, "context_length") or 16) + max(getattr(config, "lags_sequence", [0]) or [0])
        inputs["past_values"] = torch.randn(BATCH, length)
    else:
        inputs[main] = ids()
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        inputs["decoder_input_ids"] = ids()
    # Other required token inputs (e.g. InstructBLIP's `qformer_input_ids`).
    for pname, p in params.items():
        if p.default is inspect.Parameter.empty and pname.endswith("input_ids") and pname not in inputs:
            inputs[pname] = ids()
    if "pixel_values" in params and "pixel_values" not in inputs:
        channels = _sub(config, "num_channels", "in_channels") or 3
        images = torch.randn(BATCH, channels, *_image_size(config))
        return [{**inputs, "pixel_values": images}, inputs]
    return [inputs]


# --- timm --------------------------------------------------------------------------


def _shallow(name: str) -> dict:
    """Keyword arguments that make timm model `name` shallow, where its class takes its
    depth as ``depth`` (blocks, e.g. ViTs: 2) or ``depths`` (blocks per stage: 1 each).
    Blocks of a stage repeat the same operators, so this keeps every operator and shape
    the model has while cutting the time Dynamo and XLA spend on repeats of them."""
    import timm

    with torch.device("meta"):
        cls = type(timm.create_model(name, pretrained=False, num_classes=8))
    params = inspect.signature(cls.__init__).parameters
    depth = params["depth"].default if "depth" in params else None
    depths = params["depths"].default if "depths" in params else None
    if isinstance(depth, int) and not isinstance(depth, bool) and depth > 2:
        return {"depth": 2}
    if isinstance(depths, (list, tuple)) and depths and all(isinstance(d, int) for d in depths):
        return {"depths": type(depths)(1 for _ in depths)}
    return {}


def _build_timm(name: str):
    shallow = _shallow(name)
    if shallow:
        try:
            return _build_timm_with(name, shallow)
        except Exception:  # noqa: BLE001 - this variant's stages take other depths: keep its own
            pass
    return _build_timm_with(name, {})


def _build_timm_with(name: str, kwargs: dict):
    import timm

    def make(**size):
        return timm.create_model(name, pretrained=False, num_classes=8, **kwargs, **size)

    # Models with a fixed token grid (ViT family) take `img_size`; convnets take any.
    try:
        _check_size(lambda: make(img_size=TIMM_IMAGE))
        model = make(img_size=TIMM_IMAGE)
        sizes = [(TIMM_IMAGE, TIMM_IMAGE)]
    except TypeError:
        _check_size(make)
        model = make()
        # Some convnets need their default size (attention over a fixed feature grid).
        sizes = [(TIMM_IMAGE, TIMM_IMAGE), tuple(model.pretrained_cfg["input_size"][-2:])]
    channels = model.pretrained_cfg.get("input_size", (3,))[0]
    return model, [{"x": torch.randn(BATCH, channels, *hw)} for hw in sizes]
