"""A tiny GAN through two engines, one per model and optimizer, as a user writes one (tests/engine): the
discriminator steps first in every training step, then the generator. `--out DIR`: the discriminator's engine
keeps the run's records there; `--steps N`: training steps."""

import argparse

import torch
from torch import nn

import accel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--out", default=None)
args = parser.parse_args()

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 8))
discriminator = nn.Sequential(nn.Linear(8, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
eng_g, eng_d = accel.Engine(device="cpu"), accel.Engine(device="cpu", out=args.out)
generator, opt_g = eng_g.setup(generator, torch.optim.Adam(generator.parameters(), lr=2e-3))
discriminator, opt_d = eng_d.setup(discriminator, torch.optim.Adam(discriminator.parameters(), lr=2e-3))
bce = nn.functional.binary_cross_entropy_with_logits
real_mean = torch.linspace(-1, 1, 8)
ones, zeros = torch.ones(args.batch, 1), torch.zeros(args.batch, 1)

for _ in range(args.steps):
    real = real_mean + 0.1 * torch.randn(args.batch, 8)
    fake = generator(torch.randn(args.batch, 4))
    loss_d = bce(discriminator(real), ones) + bce(discriminator(fake.detach()), zeros)
    eng_d.backward(loss_d)
    opt_d.step()
    opt_d.zero_grad(set_to_none=True)
    loss_g = bce(discriminator(fake), ones)
    eng_g.backward(loss_g)
    opt_g.step()
    opt_g.zero_grad(set_to_none=True)
    opt_d.zero_grad(set_to_none=True)  # the generator's backward reached the discriminator too
    eng_d.log({"loss_d": loss_d, "loss_g": loss_g})
print(f"trained {args.steps} steps", flush=True)
eng_g.close()
eng_d.close()
