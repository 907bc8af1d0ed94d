"""A torchvision ResNet trained by a hand-written loop through accel.Engine: plain/resnet_loop.py with 4 lines
changed (import, Engine, setup, backward). The model's forward runs under the engine's precision and speed-ups;
its batches stay the loop's own `.to(device)` (or come from `eng.setup_dataloaders`). Settings from outside:

    python examples/resnet_loop.py --epochs 2
    ACCEL_SET="speedups.channels_last.enabled=false" python examples/resnet_loop.py
    torchrun --nproc-per-node 2 examples/resnet_loop.py      # DDP: the engine wraps the model
"""

import argparse
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader
from torchvision.transforms import v2

import accel

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--samples", type=int, default=256)
parser.add_argument("--size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--device", default="cpu")
args = parser.parse_args()

torch.manual_seed(0)
to_tensor = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
shape = (3, args.size, args.size)
train_set = torchvision.datasets.FakeData(args.samples, shape, num_classes=10, transform=to_tensor, random_offset=0)
val_set = torchvision.datasets.FakeData(args.samples // 4, shape, num_classes=10, transform=to_tensor, random_offset=1)
train_loader = DataLoader(train_set, batch_size=args.batch, shuffle=True, drop_last=True)
val_loader = DataLoader(val_set, batch_size=args.batch)

model = torchvision.models.resnet18(num_classes=10).to(args.device)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
eng = accel.Engine(speedups={"amp": {"dtype": "bf16"}, "channels_last": {}}, device=args.device)
model, optimizer = eng.setup(model, optimizer)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(train_loader))

start = time.perf_counter()
for epoch in range(args.epochs):
    model.train()
    for x, y in train_loader:
        x, y = x.to(args.device), y.to(args.device)
        loss = F.cross_entropy(model(x), y)
        eng.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in val_loader:
            x, y = x.to(args.device), y.to(args.device)
            correct += (model(x).argmax(1) == y).sum().item()
    print(f"epoch {epoch}: train loss {loss.item():.4f}, val accuracy {correct / len(val_set):.3f}", flush=True)
print(f"{args.epochs} epochs in {time.perf_counter() - start:.2f} s")
