#!/usr/bin/env python
"""Write a class-per-folder tree of real JPEG files from images that ship with installed packages (offline).

Classes: `digit_0` .. `digit_9` (the MNIST-5k digits shipped with accel, upscaled and tinted so they are real
colour JPEGs) and one class per sample photo from scikit-image and scikit-learn (astronaut, chelsea, coffee,
rocket, ..., china, flower), each as many random crops, resized. The tree feeds `recipes/imagefolder-jpeg.yaml`
and `accel bench-data`, so the input pipeline is tested on real JPEG decoding.

    python scripts/make_jpeg_folder.py data/jpeg-folder              # 19 classes x 300 files, 160 px
    python scripts/make_jpeg_folder.py /tmp/jpegs --per-class 20 --bad

`--bad` adds the files a real folder has: a truncated JPEG, a non-JPEG with a .jpg name, a README.txt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

SKIMAGE_PHOTOS = ["astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina"]


def photos() -> dict[str, np.ndarray]:
    """name -> HxWx3 uint8 photo, from scikit-image and scikit-learn's bundled files."""
    import skimage.data
    from sklearn.datasets import load_sample_images

    found = {name: getattr(skimage.data, name)()[..., :3] for name in SKIMAGE_PHOTOS}
    sample = load_sample_images()
    found.update({Path(path).stem: image for path, image in zip(sample.filenames, sample.images)})
    return found


def mnist_digits() -> tuple[np.ndarray, np.ndarray]:
    """(N, 28, 28) uint8 digits and their labels, read with accel's own mnist5k reader."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from accel.data.datasets.mnist import locate_mnist5k, read_mnist5k

    data = read_mnist5k(locate_mnist5k(None))
    return data.images[:, 0].numpy(), data.labels.numpy()


def random_crop(photo: np.ndarray, size: int, rng: np.random.Generator) -> Image.Image:
    """A crop covering 10-60% of the photo's area, aspect 3:4 to 4:3, maybe mirrored, resized to size x size."""
    h, w = photo.shape[:2]
    area = rng.uniform(0.1, 0.6) * h * w
    aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
    ch, cw = min(h, int(round(np.sqrt(area / aspect)))), min(w, int(round(np.sqrt(area * aspect))))
    top, left = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    crop = Image.fromarray(photo[top : top + ch, left : left + cw])
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return crop.resize((size, size), Image.Resampling.BILINEAR)


def tinted_digit(digit: np.ndarray, size: int, rng: np.random.Generator) -> Image.Image:
    """A 28x28 digit upscaled to size x size, ink and paper in random colours."""
    ink, paper = rng.integers(128, 256, 3), rng.integers(0, 96, 3)
    alpha = np.asarray(Image.fromarray(digit).resize((size, size), Image.Resampling.BICUBIC), np.float32)[..., None]
    rgb = paper + (ink - paper) * (alpha / 255.0)
    return Image.fromarray(rgb.clip(0, 255).astype(np.uint8))


def write_bad_files(root: Path, class_name: str) -> None:
    """A truncated JPEG, bytes that are not a JPEG, and a non-image file: what a real folder contains."""
    folder = root / class_name
    whole = next(folder.glob("*.jpg")).read_bytes()
    (folder / "truncated.jpg").write_bytes(whole[: len(whole) // 3])
    (folder / "not-a-jpeg.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not image data")
    (root / "README.txt").write_text("Made by scripts/make_jpeg_folder.py; not an image.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="data/jpeg-folder", help="folder to write (default %(default)s)")
    parser.add_argument("--per-class", type=int, default=300, help="files per class (default %(default)s)")
    parser.add_argument("--size", type=int, default=160, help="side of each JPEG in pixels (default %(default)s)")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bad", action="store_true", help="also write a truncated and a fake JPEG and a .txt")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    root = Path(args.out)
    digits, labels = mnist_digits()
    sources = {f"digit_{d}": digits[labels == d] for d in range(10)}
    sources.update(photos())
    for name, source in sources.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(args.per_class):
            if name.startswith("digit_"):
                image = tinted_digit(source[i % len(source)], args.size, rng)
            else:
                image = random_crop(source, args.size, rng)
            image.save(root / name / f"{i:05d}.jpg", quality=args.quality)
    if args.bad:
        write_bad_files(root, "digit_0")
    print(
        f"{root}: {len(sources)} classes x {args.per_class} JPEGs of {args.size}x{args.size}"
        + (" (+ bad files)" if args.bad else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
