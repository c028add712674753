"""Writes a small page dataset for the README's page-OCR flow, in this
directory: `images_root/{state}/{school}/{year}/{n}.png|.jpg` (pages of
their own bytes) and the first pass that allow-lists them,
`first_pass_results/label_to_curricular/…/{n}.json`. Pages 1, 2 and 4 of
one book are allow-listed: page 2 depends on page 1, page 4 stands alone.

    python make_pages.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
BOOK = ("Ohio", "Akron", "2021")


def main() -> None:
    images = HERE / "images_root" / Path(*BOOK)
    first = HERE / "first_pass_results" / "label_to_curricular" / Path(*BOOK)
    images.mkdir(parents=True, exist_ok=True)
    first.mkdir(parents=True, exist_ok=True)
    for n in range(1, 7):
        if n % 2:
            (images / f"{n}.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"jpeg page %d" % n)
        else:
            (images / f"{n}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"png page %d" % n)
    for n in (1, 2, 4):
        (first / f"{n}.json").write_text(json.dumps({"page": n, "label": "curricular"}))
    print(f"pages under {HERE / 'images_root'}, first pass under {HERE / 'first_pass_results'}")


if __name__ == "__main__":
    main()
