"""Writes a tiny random-weight Llama-architecture model and a word-level tokenizer to a
directory, with transformers and tokenizers only (no model hub, no download).

Usage: python make_tiny_model.py OUT_DIR

The model is 2 layers, hidden size 128, 2 KV heads of 64 (vLLM's CPU attention wants a head size of 32 or more): big enough to have a real KV
cache per layer, small enough that a 2-core CPU prefills a 1000-token prompt in a
moment. The tokenizer knows the words "w0" .. "w1999" (whitespace-separated) plus the
special tokens, so a prompt of N such words is N tokens (+ BOS).
"""
import json
import os
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 2048


def main(out):
    os.makedirs(out, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(VOCAB - len(vocab)):
        vocab[f"w{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=4096, bos_token_id=1,
                      eos_token_id=2, torch_dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    print(f"tiny model written to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama")
