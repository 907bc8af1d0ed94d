"""A Hugging Face Trainer script of the usual shape (HfArgumentParser + TrainingArguments + Trainer), no accel in it:
a 2-layer GPT-2 built from its config, trained on random token ids."""

from dataclasses import dataclass, field

import torch
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    n_layer: int = field(default=2)
    n_embd: int = field(default=64)
    n_head: int = field(default=2)
    context: int = field(default=32)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed, context):
        self.ids = torch.randint(0, 256, (n, context), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


model_args, args = HfArgumentParser((ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
torch.manual_seed(0)
shape = {"n_embd": model_args.n_embd, "n_layer": model_args.n_layer, "n_head": model_args.n_head}
config = GPT2Config(vocab_size=256, n_positions=model_args.context, **shape)
data = {"train_dataset": Tokens(2048, 0, model_args.context), "eval_dataset": Tokens(64, 1, model_args.context)}
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, **data)
trainer.train()
trainer.save_model()
