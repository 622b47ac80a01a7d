"""Tiny Hugging Face models and a word-level tokenizer, built from configs with random
weights and saved locally with `save_pretrained` (nothing comes from the hub)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

WORDS = ("the a of to and in is it that for on with as by this be are from or an not can "
         "device tensor model graph value kernel shape layer token batch cache step loss").split()


def word_tokenizer():
    """A whitespace word-level fast tokenizer over WORDS (vocabulary size 64, padded on
    the left as decoder-only generation wants)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "<pad>", "<eos>"] + WORDS)}
    vocab.update({f"w{i}": i for i in range(len(vocab), 64)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<eos>", padding_side="left")


def tiny_gpt2(seed: int = 0):
    """A 2-layer GPT-2 LM (width 32, 2 heads, vocabulary 64, LM head tied to the token
    embedding), dropout off. The large init spread keeps greedy decoding from settling on
    one repeated token, so comparisons cover varied steps."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.3, bos_token_id=2,
                     eos_token_id=2, pad_token_id=1)
    return GPT2LMHeadModel(cfg).eval()


def tiny_llama(seed: int = 0):
    """A 2-layer Llama LM (width 32, 4 query heads sharing 2 key/value heads, RoPE,
    RMSNorm, SwiGLU MLP, vocabulary 64, untied head)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      initializer_range=0.3, bos_token_id=2, eos_token_id=2, pad_token_id=1)
    return LlamaForCausalLM(cfg).eval()


def save(model, directory) -> str:
    """Saves `model` and the word tokenizer into `directory`; returns it as a str."""
    model.save_pretrained(directory)
    word_tokenizer().save_pretrained(directory)
    return str(directory)
