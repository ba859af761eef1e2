"""What a verl run on CPU needs made on the spot: a tiny random model, a word-level tokenizer with a chat
template in its own directory, a parquet of prompts, and a reward function. No download."""

from __future__ import annotations

import json
import os

WORDS = 61
# Qwen's ChatML, which verl's agent loop recognises (its Qwen token builder needs "\n" as one token and
# <|im_end|>)
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Deterministic and varied: the share of the ground truth's words in the answer."""
    words = set(str(ground_truth).split())
    said = str(solution_str).split()
    return sum(w in words for w in said) / max(len(said), 1)
'''


def tokenizer(path: str) -> dict:
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = [*SPECIAL, "<unk>", "\n", "user", "assistant", "system", *(f"w{i}" for i in range(WORDS))]
    vocab = {w: i for i, w in enumerate(words)}
    core = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex("\n"), "isolated"),
                                                  pre_tokenizers.Split(Regex(" +"), "removed")])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                  unk_token="<unk>", additional_special_tokens=SPECIAL[1:])
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return vocab


def model(path: str, vocab_size: int, arch: str = "qwen2", seed: int = 0, layers: int = 2) -> None:
    """hidden 64 with 2 heads of 32: vLLM's CPU attention takes head dims 32, 64, 80, ..."""
    import torch
    from transformers import AutoModelForCausalLM

    common = dict(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=layers, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, max_position_embeddings=128, tie_word_embeddings=False,
                  pad_token_id=0, eos_token_id=2, bos_token_id=0)
    if arch == "qwen2":
        from transformers import Qwen2Config

        cfg = Qwen2Config(intermediate_size=128, architectures=["Qwen2ForCausalLM"], **common)
    elif arch == "qwen3moe":
        from transformers import Qwen3MoeConfig

        cfg = Qwen3MoeConfig(intermediate_size=128, moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
                             decoder_sparse_step=1, norm_topk_prob=True, mlp_only_layers=[],
                             architectures=["Qwen3MoeForCausalLM"], **common)
    else:
        raise ValueError(f"unknown arch {arch!r}")
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)


def dataset(path: str, n: int, seed: int = 0) -> None:
    """n prompts of 3 to 6 words in verl's RLHFDataset layout."""
    import random

    import pandas as pd

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = [f"w{rng.randrange(WORDS)}" for _ in range(rng.randint(3, 6))]
        rows.append({"data_source": "tiny", "prompt": [{"role": "user", "content": " ".join(words)}],
                     "ability": "copy", "reward_model": {"style": "rule", "ground_truth": " ".join(words)},
                     "extra_info": {"index": i}})
    pd.DataFrame(rows).to_parquet(path)


def make(root: str, arch: str = "qwen2", prompts: int = 16, layers: int = 2) -> dict:
    """Everything in root; returns the paths."""
    paths = {k: os.path.join(root, k) for k in ("model", "tokenizer")}
    paths.update(train=os.path.join(root, "train.parquet"), val=os.path.join(root, "val.parquet"),
                 reward=os.path.join(root, "reward.py"))
    os.makedirs(paths["tokenizer"], exist_ok=True)
    vocab = tokenizer(paths["tokenizer"])
    model(paths["model"], len(vocab), arch, layers=layers)
    dataset(paths["train"], prompts)
    dataset(paths["val"], 4, seed=1)
    with open(paths["reward"], "w") as fh:
        fh.write(REWARD)
    with open(os.path.join(root, "made.json"), "w") as fh:
        json.dump({"arch": arch, "prompts": prompts, "layers": layers}, fh)
    return paths


if __name__ == "__main__":  # python tiny.py DIR [ARCH [LAYERS]]: the data, and DIR/paths.json naming it
    import sys

    made = make(sys.argv[1], *(sys.argv[2:3] or ["qwen2"]), layers=int((sys.argv[3:4] or [2])[0]))
    with open(os.path.join(sys.argv[1], "paths.json"), "w") as fh:
        json.dump(made, fh)
