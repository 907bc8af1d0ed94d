"""A Lightning script of the usual shape (a LightningModule, a LightningDataModule, LightningCLI), no accel in it: a
2-layer causal transformer trained on random token ids.

    python examples/lightning_cli.py fit --trainer.max_steps 100 --trainer.precision bf16-mixed
"""

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader


class TinyLM(LightningModule):
    def __init__(self, vocab: int = 256, width: int = 64, layers: int = 2, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, width)
        block = nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=4 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        return self.head(self.blocks(self.embed(ids), mask=mask, is_causal=True))

    def loss(self, window):
        logits = self(window[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), window[:, 1:].flatten())

    def training_step(self, window, index):
        loss = self.loss(window)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, window, index):
        self.log("val_loss", self.loss(window))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


class Tokens(LightningDataModule):
    def __init__(self, batch_size: int = 16, context: int = 32, num_workers: int = 0):
        super().__init__()
        self.save_hyperparameters()

    def windows(self, n, seed):
        return torch.randint(0, 256, (n, self.hparams.context + 1), generator=torch.Generator().manual_seed(seed))

    def loader(self, windows, shuffle=False):
        return DataLoader(windows, self.hparams.batch_size, shuffle=shuffle, num_workers=self.hparams.num_workers)

    def train_dataloader(self):
        return self.loader(self.windows(4096, 0), shuffle=True)

    def val_dataloader(self):
        return self.loader(self.windows(64, 1))


if __name__ == "__main__":
    torch.manual_seed(0)
    LightningCLI(TinyLM, Tokens)
