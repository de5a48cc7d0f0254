"""Hidden tests, A5 part 5: the trained ViT and the [CLS] attention map (6 points).

The grader draws its own stratified 80 / 20 split of the digits (from the test's seed), calls the
student's ``train_vit`` on the training part inside the sandbox (one thread, at most 60 s of CPU
time) and measures the returned model's accuracy on the held-out part here. The training
function may not load data itself, nor use course_lib's models. (The fused-attention ban is
checked where the ViT's forward is graded; here its dispatch-level detector would cost more
than the training itself.) CANARY-HIDDEN-A5-3b8d40f6
"""

from __future__ import annotations

import pytest
import torch
from a5_helpers import close, draw

from course_lib.data.digits import load_digits_tensors, stratified_split
from course_lib.models.vit import cls_attention_maps

THRESHOLD = 0.95


@pytest.mark.points(4, cell="check_train_vit")
@pytest.mark.forbid("course_lib", "course_lib.data", "sklearn.datasets")
@pytest.mark.call_timeout(60)
def test_train_vit_reaches_95_percent(student, seed):
    images, labels = load_digits_tensors()
    train, test = stratified_split(labels, seed=seed)
    model = student.train_vit(images[train], labels[train])
    logits = torch.cat([model(images[test][i : i + 180]) for i in range(0, len(test), 180)])
    assert tuple(logits.shape) == (len(test), 10), (
        f"the trained model should return logits of shape (N, 10), got {tuple(logits.shape)}"
    )
    accuracy = (logits.argmax(-1) == labels[test]).float().mean().item()
    assert accuracy >= THRESHOLD, (
        f"the trained ViT reaches {accuracy:.1%} on the grader's held-out digits, below "
        f"{THRESHOLD:.0%} (train on the data passed in, return the model in eval mode)"
    )


@pytest.mark.points(2, cell="check_cls_attention_map")
@pytest.mark.forbid("course_lib")
def test_cls_attention_map(student, rng):
    gh = draw(rng, 2, 3)  # at least 2 x 2, not square: a transposed grid shows
    gw = gh + draw(rng, 1, 2)
    T = gh * gw + 1
    for shape in ((draw(rng, 1, 3), draw(rng, 1, 4), T, T), (draw(rng, 1, 3), T, T)):
        weights = torch.rand(*shape, generator=rng).softmax(-1)
        close(student.cls_attention_map(weights, (gh, gw)), cls_attention_maps(weights, (gh, gw)),
              f"cls_attention_map(weights {shape}, ({gh}, {gw}))")  # fmt: skip
