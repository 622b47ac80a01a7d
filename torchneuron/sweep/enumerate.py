"""Which models the sweep covers, and how each is built small, offline, with random weights.

transformers: every entry of `MODEL_MAPPING_NAMES` (the base model of each
architecture, as `AutoModel` would pick it). The default config of its config class is
shrunk generically through the config's own attribute names (layers, widths, heads,
vocabulary; sub-configs recursively) keeping the relations the model relies on (see
`shrink_config`), so nothing is downloaded; inputs follow the forward signature.
timm: every name of `timm.list_models()`, built with `pretrained=False`, few classes, a
small input (or the first larger one a fixed token grid takes) and, where the model's
class takes ``depth``/``depths``, 2 blocks (1 where 2 are over `MAX_PARAMS`; 1 per stage).

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
    # convolutional VQ image tokenizers (VQGAN: Chameleon, Emu3): 32 is the least width
    # their GroupNorm(32) takes
    "base_channels": 32, "num_res_blocks": 1,
    # vocabulary and input sizes
    "vocab_size": 256, "max_source_positions": 1500,
}

#: Name endings of integer attributes that shrink like the `_SMALL_INTS` entry they end
#: with (first match wins): widths and heads a sub-module or cross-attention restates
#: (``encoder_hidden_size``, ``cross_num_attention_heads``, ``qk_rope_head_dim``).
_SMALL_SUFFIXES = (
    ("_hidden_size", 32), ("_intermediate_size", 64), ("_attention_heads", 2),
    ("_n_heads", 2), ("_head_dim", 16), ("_d_head", 16), ("_num_layers", 2),
)

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


def shrink_config(config, width_scale: int = 1) -> None:
    """Shrinks a transformers config in place through its attribute names (sub-configs
    included): depth to 2 layers, widths to 32-64 (times `width_scale`), 2 heads, a
    256-token vocabulary.

    Guarantees, for every (sub-)config, where the attributes exist: at least 1 head (per
    stage too), ``hidden_size`` divisible by ``num_attention_heads``, key/value heads
    dividing the heads, rotary dims within the head size, state-space heads times head
    size equal to the expanded width, group counts dividing the shrunk widths, and special
    token ids inside the vocabulary. A width named after another one (``encoder_hidden_size``,
    ``hidden_size_global``, ``cross_head_dim``) shrinks the same way, so cross-modal and
    cross-attention projections agree with the sub-config they read."""
    from transformers import PretrainedConfig

    original = dict(vars(config))
    # Explicit per-stage channel lists (HGNetV2's ``stage_out_channels``) restate the stage
    # widths that ``hidden_sizes`` gives and that other configs (a detector's encoder) read:
    # shrinking only one of them would make them disagree, so such a config keeps its widths.
    explicit_stages = any(k.startswith("stage_") and k.endswith("channels") for k in original)
    for key, value in original.items():
        if isinstance(value, PretrainedConfig):
            shrink_config(value, width_scale)
        elif isinstance(value, dict) and key.endswith("_config"):
            continue
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            small = _small_int(key, width_scale)
            if small is not None and value > small:
                setattr(config, key, small)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            if key in _STAGE_DEPTHS:
                setattr(config, key, type(value)(1 for _ in value))
            elif key in _STAGE_WIDTHS and not explicit_stages:
                setattr(config, key, type(value)(max(8, v // 16) for v in value))
            elif key.endswith("heads") and not isinstance(value[0], bool):
                # Per-stage heads (Swin's (3, 6, 12, 24)): a power of two divides the
                # (power-of-two multiple of 32) stage widths; 3 would divide none of them.
                setattr(config, key, type(value)(_pow2_floor(v) for v in value))
    _restated_widths(config, original)
    _keep_consistent(config, original)
    _propagate_rope_theta(config)
    # Time-series configs (Autoformer, Informer, ...) leave the forecast horizon unset
    # (None) and their models refuse to build without it; the context defaults to it.
    if "prediction_length" in original and original["prediction_length"] is None:
        config.prediction_length = 4
        if vars(config).get("context_length") is None and "context_length" in original:
            config.context_length = 4
        # The decoder's known prefix (Autoformer's label window) is part of the context.
        if isinstance(vars(config).get("label_length"), int):
            config.label_length = min(config.label_length, config.context_length)
    # Image tokens of multimodal models are the last text id (`_transformers_inputs`
    # draws text below it).
    text_vocab = _sub(config.get_text_config() if hasattr(config, "get_text_config") else config, "vocab_size")
    if isinstance(text_vocab, int):
        # Query-token vision-language models (BLIP-2, InstructBLIP) splice their query
        # outputs in at image-token positions; a config without the token id matches none.
        if "num_query_tokens" in original and original.get("image_token_index", 0) is None:
            config.image_token_index = text_vocab - 1
        # VQ-token models (Chameleon, Emu3) map image codes to text ids through a vocabulary
        # map that only a tokenizer fills; without one the model does not build. A map with
        # just the image token builds it and runs its text path.
        if "vocabulary_map" in original and original["vocabulary_map"] is None:
            config.vocabulary_map = {"<image>": text_vocab - 1}
    # Per-model (no class): DBRX's default `clip_qkv=None` makes its attention call
    # `clamp(min=None, max=None)`, which raises; 8 is what the released DBRX uses.
    if type(config).__name__ == "DbrxConfig" and config.attn_config.clip_qkv is None:
        config.attn_config.clip_qkv = 8.0
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for key, value in list(vars(config).items()):
            if (key.endswith("_token_id") or key.endswith("_token_index")) and isinstance(value, int) \
                    and not isinstance(value, bool) and value >= vocab:
                setattr(config, key, vocab - 1)
    if hasattr(config, "use_cache"):
        config.use_cache = False


def _small_int(key: str, width_scale: int = 1):
    """The value integer attribute `key` shrinks to, or None to keep it: exact names of
    `_SMALL_INTS` first, then name endings of `_SMALL_SUFFIXES` (``cross_hidden_size``,
    ``mamba_n_heads``), then ``hidden_size_*`` (``hidden_size_global``). Widths (not
    depths, head or expert counts, vocabularies) are multiplied by `width_scale`."""
    small = _SMALL_INTS.get(key)
    if small is None:
        small = next((v for suffix, v in _SMALL_SUFFIXES if key.endswith(suffix)), None)
    if small is None and key.startswith("hidden_size_"):
        small = _SMALL_INTS["hidden_size"]
    if small is not None and _is_width(key):
        small *= width_scale
    return small


def _is_width(key: str) -> bool:
    return any(w in key for w in ("size", "dim", "d_model", "n_embd", "n_inner", "d_ff", "d_kv", "d_head")) \
        and not any(w in key for w in ("vocab", "position"))


def _pow2_floor(n: int) -> int:
    """The largest power of two <= `n`, and 1 for n < 1."""
    return 1 << (max(1, n).bit_length() - 1)


def _int_attr(config, key):
    """``config.key`` when it is set on `config` itself (under its own name or the one
    its ``attribute_map`` gives, e.g. GPT-J's ``n_embd`` for ``hidden_size``) and an int,
    else None. Read from ``vars``: a heterogeneous config raises on a global read of a
    per-layer attribute."""
    value = vars(config).get(getattr(config, "attribute_map", {}).get(key, key))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _restated_widths(config, original: dict) -> None:
    """Shrinks, to the shrunk ``hidden_size`` (head size), every other width-named
    integer left unshrunk whose original value was the original ``hidden_size`` (head
    size), e.g. BROS's ``dim_bbox_projection``: such a width feeds the same layers or
    attention heads, whatever the model calls it. Only large originals (>= 256, >= 32)
    count, so a coincidence with a small count is unlikely."""
    old, new = original.get("hidden_size"), _int_attr(config, "hidden_size")
    old_heads, new_heads = original.get("num_attention_heads"), _int_attr(config, "num_attention_heads")
    if not isinstance(old, int) or isinstance(old, bool) or not new or old < 256 or new == old:
        return
    pairs = [(old, new)]
    if isinstance(old_heads, int) and old_heads > 0 and new_heads and old % old_heads == 0 \
            and old // old_heads >= 32:
        pairs.append((old // old_heads, new // new_heads))
    for key, value in original.items():
        for was, now in pairs:
            if value == was and key not in ("hidden_size", "num_attention_heads") \
                    and _int_attr(config, key) == was \
                    and any(w in key for w in ("dim", "size", "hidden", "proj")) \
                    and not any(w in key for w in ("position", "vocab", "image", "patch", "length")):
                setattr(config, key, now)


def _keep_consistent(config, original: dict) -> None:
    """Restores the relations between shrunk attributes of one config that the model
    relies on (see `shrink_config`). `original` holds the values before shrinking."""
    import math

    hidden, heads = _int_attr(config, "hidden_size"), _int_attr(config, "num_attention_heads")
    if hidden and heads is not None:
        heads = math.gcd(hidden, max(1, heads))
        config.num_attention_heads = heads
    for key in original:
        kv = _int_attr(config, key)
        if not key.endswith("key_value_heads") or kv is None:
            continue
        # The heads this key/value count pairs with: the same prefix (``cross_``).
        q = _int_attr(config, key.replace("key_value_heads", "attention_heads"))
        if q is not None:
            # Grouped-query attention stays grouped (1 key/value head) where it was.
            setattr(config, key, q if kv >= q else 1)
    # Multi-head latent attention (DeepSeek-V2/V3 style): the query/key head is the
    # concatenation of its no-rope and rope parts.
    nope, rope = _int_attr(config, "qk_nope_head_dim"), _int_attr(config, "qk_rope_head_dim")
    if nope is not None and rope is not None and "qk_head_dim" in original:
        config.qk_head_dim = nope + rope
    # A partial rotary embedding cannot rotate more channels than a head has.
    head = _int_attr(config, "head_dim") or (hidden // heads if hidden and heads else None)
    for key in ("rotary_dim", "rotary_emb_dim", "rope_dim"):
        dim = _int_attr(config, key)
        if head and dim and dim > head:
            setattr(config, key, head - head % 2)
    # State-space (Mamba-2) heads: heads x head size must be the expanded width (which
    # Falcon-H1 also states as ``mamba_d_ssm``), and the B/C groups split the heads.
    for prefix in ("mamba_", "ssm_", ""):
        expand = _int_attr(config, prefix + "expand")
        n_key = next((k for k in (prefix + "n_heads", prefix + "num_heads", f"n_{prefix}heads")
                      if k in original), None)
        d_key = next((prefix + k for k in ("d_head", "head_dim", "headdim") if prefix + k in original), None)
        n = _int_attr(config, n_key) if n_key else None
        if expand and hidden and n and d_key and (expand * hidden) % n == 0:
            setattr(config, d_key, expand * hidden // n)
            if _int_attr(config, prefix + "d_ssm"):
                setattr(config, prefix + "d_ssm", expand * hidden)
            for g_key in (prefix + "n_groups", prefix + "ngroups"):
                if _int_attr(config, g_key):
                    setattr(config, g_key, math.gcd(_int_attr(config, g_key), n))
    # Expert groups (DeepSeek-V3 style routing): the experts split evenly into groups of
    # at least 2 (routing sums each group's top 2), and a token picks at most all groups.
    experts = _int_attr(config, "n_routed_experts") or _int_attr(config, "num_experts")
    n_group = _int_attr(config, "n_group")
    if experts and n_group:
        config.n_group = n_group = max(1, math.gcd(n_group, experts // 2))
        if _int_attr(config, "topk_group"):
            config.topk_group = min(config.topk_group, n_group)
    # A width that is another shrunk width times a ratio (BLT: the local encoder's width
    # times ``cross_attn_k`` is the global width) keeps the ratio of the shrunk widths.
    glob = _int_attr(config, "hidden_size_global")
    if glob and hidden and _int_attr(config, "cross_attn_k"):
        config.cross_attn_k = max(1, glob // hidden)
    # Group counts (GroupNorm's, grouped convolutions') must divide the shrunk widths,
    # which are all multiples of 8.
    for key in original:
        groups = _int_attr(config, key)
        if key.endswith("groups") and groups and groups > 1:
            setattr(config, key, math.gcd(groups, 8))


def _propagate_rope_theta(config) -> None:
    """Gives every sub-config without ``rope_theta`` its parent's (from
    ``rope_parameters``): some models still read the legacy attribute off a sub-config
    (DBRX's attention config) that the current config classes no longer set."""
    from transformers import PretrainedConfig

    theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta") \
        if isinstance(getattr(config, "rope_parameters", None), dict) else None
    if theta is None:
        return
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig) and "rope_theta" not in vars(value) \
                and not isinstance(getattr(value, "rope_parameters", None), dict):
            value.rope_theta = theta


def _build_transformers(model_type: str):
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    class_name = MODEL_MAPPING_NAMES[model_type]
    if isinstance(class_name, (list, tuple)):
        class_name = class_name[0]
    cls = getattr(transformers, class_name)
    first = None
    # Some models fix the head size in code rather than in the config (BridgeTower's
    # vision attention has hidden_size // 64 heads: none at width 32); a constructor
    # that refuses the small widths gets a second try at twice the widths.
    for width_scale in (1, 2):
        config = CONFIG_MAPPING[model_type]()
        shrink_config(config, width_scale)
        # The eager attention is the reference implementation every model has.
        config._attn_implementation = "eager"
        try:
            with torch.device("meta"):
                cls(config)
            break
        except Exception as exc:  # noqa: BLE001 - retried wider; the first error is the reason
            first = first or exc
    else:
        raise first
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
    ids for encoder-decoder models, any other required `*input_ids`, token boxes
    (``bbox``) and a forecaster's time features; for a model whose forward also takes
    images (CLIP style), first a candidate with both (BLIP-2 style: with one image token
    per query). Then the main input's other layouts (an audio codec's channels, a
    conformer's frames-first features). Integer ids are drawn below the text vocabulary."""
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    vocab = _sub(config.get_text_config() if hasattr(config, "get_text_config") else config,
                 "vocab_size") or 256
    inputs = {}
    extra = []  # other layouts of the main input, tried when the first does not run

    if {"states", "actions", "returns_to_go", "timesteps"} <= set(params):
        # Per-model (no class): the Decision Transformer's inputs are trajectories
        # (float states, actions and returns, integer timesteps), not tokens or images.
        state, act = _sub(config, "state_dim") or 17, _sub(config, "act_dim") or 4
        return [{"states": torch.randn(BATCH, SEQ_LEN, state), "actions": torch.randn(BATCH, SEQ_LEN, act),
                 "rewards": torch.randn(BATCH, SEQ_LEN, 1), "returns_to_go": torch.randn(BATCH, SEQ_LEN, 1),
                 "timesteps": torch.arange(SEQ_LEN).expand(BATCH, SEQ_LEN).contiguous(),
                 "attention_mask": torch.ones(BATCH, SEQ_LEN, dtype=torch.long)}]

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
        # Neural audio codecs (DAC, EnCodec) take (batch, channels, samples) instead.
        channels = _sub(config, "audio_channels") or 1
        extra.append({"input_values": torch.randn(BATCH, channels, 4000)})
    elif main == "input_features":
        mels = _sub(config, "num_mel_bins", "feature_size", "input_feat_per_channel") or 80
        frames = 2 * (_sub(config, "max_source_positions") or 1500)
        inputs["input_features"] = torch.randn(BATCH, mels, frames)
        # Conformer encoders (Parakeet, Canary) take (batch, frames, mel bins) instead.
        extra.append({"input_features": inputs["input_features"].transpose(1, 2).contiguous()})
    elif main == "past_values":
        length = (_sub(config, "context_length") or 16) + max(getattr(config, "lags_sequence", [0]) or [0])
        inputs["past_values"] = torch.randn(BATCH, length)
        if "past_time_features" in params:
            # Probabilistic forecasters (Autoformer, Informer) also require the time
            # features of the past window and which of its values are observed.
            features = _sub(config, "num_time_features") or 0
            inputs["past_time_features"] = torch.randn(BATCH, length, features)
            inputs["past_observed_mask"] = torch.ones(BATCH, length)
            horizon = _sub(config, "prediction_length")
            if horizon and "future_time_features" in params:
                inputs["future_values"] = torch.randn(BATCH, horizon)
                inputs["future_time_features"] = torch.randn(BATCH, horizon, features)
    else:
        inputs[main] = ids()
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        inputs["decoder_input_ids"] = ids()
    # Other required token inputs (e.g. InstructBLIP's `qformer_input_ids`).
    for pname, p in params.items():
        if p.default is inspect.Parameter.empty and pname.endswith("input_ids") and pname not in inputs:
            inputs[pname] = ids()
    if "bbox" in params and "bbox" not in inputs:
        # Layout models (LayoutLM, BROS) read a box per token: whole coordinates in
        # [0, 1000) with x0 <= x1 and y0 <= y1, as 4 numbers or BROS's 4 corners (8).
        x = torch.randint(0, 1000, (BATCH, SEQ_LEN, 2)).sort(-1).values
        y = torch.randint(0, 1000, (BATCH, SEQ_LEN, 2)).sort(-1).values
        box = torch.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], -1)
        if (_sub(config, "dim_bbox") or 4) == 8:
            box = box[..., [0, 1, 2, 1, 2, 3, 0, 3]]
        inputs["bbox"] = box
    if "pixel_values" in params and "pixel_values" not in inputs:
        channels = _sub(config, "num_channels", "in_channels") or 3
        images = torch.randn(BATCH, channels, *_image_size(config))
        return [_image_tokens({**inputs, "pixel_values": images}, config), inputs,
                *({**inputs, **e} for e in extra)]
    return [_image_tokens(inputs, config), *({**inputs, **e} for e in extra)]


def _image_tokens(inputs: dict, config) -> dict:
    """`inputs` with, for a query-token vision-language model (BLIP-2, InstructBLIP) given
    both images and text, one image token per query output before the text (its prompt
    layout), so the vision path feeds the language model; the text itself never holds
    the image token. Other inputs are returned as they are."""
    token, count = vars(config).get("image_token_index"), vars(config).get("num_query_tokens")
    if not (isinstance(token, int) and isinstance(count, int) and {"input_ids", "pixel_values"} <= set(inputs)):
        return inputs
    text = inputs["input_ids"].masked_fill(inputs["input_ids"] == token, 3)
    return {**inputs, "input_ids": torch.cat([torch.full((BATCH, count), token), text], 1)}


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
    """Builds timm model `name` shallow (`_shallow`) where its class allows, else at its
    own depth; over `MAX_PARAMS` at 2 blocks, a ``depth`` model gets 1 block."""
    shallow = _shallow(name)
    if shallow:
        try:
            return _build_timm_with(name, shallow)
        except Exception as exc:  # noqa: BLE001 - this variant's stages take other depths: keep its own
            if "over the sweep's" in str(exc) and shallow.get("depth", 0) > 1:
                # Blocks this wide (AIMv2-1B: 2 blocks are 104M) still fit one at a time.
                return _build_timm_with(name, {"depth": 1})
    return _build_timm_with(name, {})


def _build_timm_with(name: str, kwargs: dict):
    """A model with a fixed token grid (ViT family) takes ``img_size``: it is built for
    `TIMM_IMAGE`, else for `TIMM_IMAGE` rounded up to whole patches, else for its own
    default size, whichever first runs a CPU forward. Convnets take any size."""
    import timm

    def make(**size):
        return timm.create_model(name, pretrained=False, num_classes=8, **kwargs, **size)

    try:
        _check_size(lambda: make(img_size=TIMM_IMAGE))
    except TypeError:
        _check_size(make)
        model = make()
        # Some convnets need their default size (attention over a fixed feature grid).
        sizes = [(TIMM_IMAGE, TIMM_IMAGE), tuple(model.pretrained_cfg["input_size"][-2:])]
        channels = model.pretrained_cfg.get("input_size", (3,))[0]
        return model, [{"x": torch.randn(BATCH, channels, *hw)} for hw in sizes]
    tried, first = set(), None
    for size in _timm_sizes(name, make):
        if size in tried:
            continue
        tried.add(size)
        model = make(img_size=size)
        channels = model.pretrained_cfg.get("input_size", (3,))[0]
        x = torch.randn(BATCH, channels, size, size)
        try:
            # Checked in eval mode without gradients: no dropout draws from the seeded
            # generator, so a model that runs at the first size is built as before.
            with torch.no_grad():
                model.eval()(x)
            return model.train(), [{"x": x}]
        except Exception as exc:  # noqa: BLE001 - the next size may fit the model's grid
            first = first or exc
    raise first


def _timm_sizes(name: str, make):
    """Image sizes to build an ``img_size`` model for, in order (see `_build_timm_with`)."""
    import math

    yield TIMM_IMAGE
    with torch.device("meta"):
        meta = make(img_size=TIMM_IMAGE)
    patch = getattr(getattr(meta, "patch_embed", None), "patch_size", None)
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    if isinstance(patch, int) and patch > 0:
        yield patch * math.ceil(TIMM_IMAGE / patch)
    default = meta.pretrained_cfg.get("input_size")
    if default:
        _check_size(lambda: make(img_size=default[-1]))
        yield default[-1]
