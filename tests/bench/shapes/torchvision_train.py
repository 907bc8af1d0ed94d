"""The shape of torchvision's references/classification/train.py, cut to what a bench meets: `get_args_parser`
with its spellings (`-b/--batch-size`, `-j/--workers`, `--wd/--weight-decay`, `--amp`,
`--use-deterministic-algorithms`, `--output-dir` defaulting to "."), `main(args)`, a MetricLogger-style print every
`--print-freq` steps, an evaluation and two checkpoints under `--output-dir` after each epoch. FakeData stands in
for ImageFolder so that nothing is read from disk."""

import datetime
import os
import time

import torch
import torch.utils.data
import torchvision
from torch import nn
from torchvision.transforms import v2


def mkdir(path):
    os.makedirs(path, exist_ok=True)


def train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args, scaler=None):
    model.train()
    start = time.time()
    for i, (image, target) in enumerate(data_loader):
        image, target = image.to(device), target.to(device)
        with torch.autocast(device.type, enabled=scaler is not None):
            output = model(image)
            loss = criterion(output, target)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        if i % args.print_freq == 0:
            print(f"Epoch: [{epoch}] [{i}/{len(data_loader)}] loss: {loss.item():.4f} time: {time.time() - start:.1f}")


def evaluate(model, criterion, data_loader, device):
    model.eval()
    correct = total = 0
    with torch.inference_mode():
        for image, target in data_loader:
            output = model(image.to(device))
            correct += (output.argmax(1) == target.to(device)).sum().item()
            total += len(target)
    print(f"Test: Acc@1 {100 * correct / total:.3f}")
    return correct / total


def load_data(args):
    transform = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    size = (3, args.train_crop_size, args.train_crop_size)
    dataset = torchvision.datasets.FakeData(args.train_size, size, num_classes=10, transform=transform)
    dataset_test = torchvision.datasets.FakeData(args.batch_size, size, num_classes=10, transform=transform)
    return dataset, dataset_test


def main(args):
    if args.output_dir:
        mkdir(args.output_dir)
    print(args)
    device = torch.device(args.device)
    if args.use_deterministic_algorithms:
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True)
    else:
        torch.backends.cudnn.benchmark = True
    dataset, dataset_test = load_data(args)
    data_loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, pin_memory=args.device != "cpu"
    )
    data_loader_test = torch.utils.data.DataLoader(dataset_test, batch_size=args.batch_size, num_workers=args.workers)
    model = torchvision.models.get_model(args.model, weights=args.weights, num_classes=10)
    model.to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if args.amp else None
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step_size, gamma=args.lr_gamma)
    print("Start training")
    start_time = time.time()
    for epoch in range(args.start_epoch, args.epochs):
        train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args, scaler)
        lr_scheduler.step()
        evaluate(model, criterion, data_loader_test, device=device)
        if args.output_dir:
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
            torch.save(checkpoint, os.path.join(args.output_dir, "checkpoint.pth"))
    print(f"Training time {datetime.timedelta(seconds=int(time.time() - start_time))}")


def get_args_parser(add_help=True):
    import argparse

    parser = argparse.ArgumentParser(description="PyTorch Classification Training", add_help=add_help)
    parser.add_argument("--data-path", default="/datasets01/imagenet_full_size/061417/", type=str, help="dataset path")
    parser.add_argument("--model", default="resnet18", type=str, help="model name")
    parser.add_argument("--device", default="cuda", type=str, help="device (Use cuda or cpu Default: cuda)")
    parser.add_argument("-b", "--batch-size", default=32, type=int, help="images per gpu")
    parser.add_argument("--epochs", default=90, type=int, metavar="N", help="number of total epochs to run")
    parser.add_argument(
        "-j", "--workers", default=16, type=int, metavar="N", help="number of data loading workers (default: 16)"
    )
    parser.add_argument("--opt", default="sgd", type=str, help="optimizer")
    parser.add_argument("--lr", default=0.1, type=float, help="initial learning rate")
    parser.add_argument("--momentum", default=0.9, type=float, metavar="M", help="momentum")
    parser.add_argument(
        "--wd", "--weight-decay", default=1e-4, type=float, metavar="W", help="weight decay", dest="weight_decay"
    )
    parser.add_argument("--label-smoothing", default=0.0, type=float, help="label smoothing (default: 0.0)")
    parser.add_argument("--lr-step-size", default=30, type=int, help="decrease lr every step-size epochs")
    parser.add_argument("--lr-gamma", default=0.1, type=float, help="decrease lr by a factor of lr-gamma")
    parser.add_argument("--print-freq", default=10, type=int, help="print frequency")
    parser.add_argument("--output-dir", default=".", type=str, help="path to save outputs")
    parser.add_argument("--resume", default="", type=str, help="path of checkpoint")
    parser.add_argument("--start-epoch", default=0, type=int, metavar="N", help="start epoch")
    parser.add_argument("--sync-bn", dest="sync_bn", help="Use sync batch norm", action="store_true")
    parser.add_argument("--test-only", dest="test_only", help="Only test the model", action="store_true")
    parser.add_argument(
        "--use-deterministic-algorithms", action="store_true", help="Forces the use of deterministic algorithms only."
    )
    parser.add_argument("--train-crop-size", default=224, type=int, help="the random crop size used for training")
    parser.add_argument("--train-size", default=1000, type=int, help="FakeData's images (in place of --data-path)")
    parser.add_argument("--amp", action="store_true", help="Use torch.cuda.amp for mixed precision training")
    parser.add_argument("--weights", default=None, type=str, help="the weights enum name to load")
    return parser


if __name__ == "__main__":
    args = get_args_parser().parse_args()
    main(args)
