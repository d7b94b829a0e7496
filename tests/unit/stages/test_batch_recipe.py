"""MixUp / CutMix (torchvision.transforms.v2) and data.resize_schedule against hand computations (issue 22)."""
from __future__ import annotations

import pytest
import torch

from fastpipe.config.data import resize_schedule
from fastpipe.errors import ConfigError
from fastpipe.stages.batch_recipe import BatchRecipe, build_batch_recipe, build_mix, resize, resize_steps, size_at
from fastpipe.stages.tasks import Classification, LanguageModelling


def two_images():
    """Image 0 all zeros (label 0), image 1 all ones (label 1): mixing them shows the weights directly."""
    return torch.stack([torch.zeros(3, 8, 8), torch.ones(3, 8, 8)]), torch.tensor([0, 1])


def test_mixup_mixes_each_image_with_the_previous_one_and_the_labels_alike():
    torch.manual_seed(0)
    images, labels = two_images()
    mixed, soft = build_mix(0.4, None, num_classes=3)(images, labels)
    lam = soft[0, 0].item()  # image 0 keeps lam of itself (label 0), takes 1 - lam of image 1 (label 1)
    assert 0.0 < lam < 1.0
    assert torch.allclose(mixed[0], torch.full((3, 8, 8), 1.0 - lam))  # lam * 0 + (1 - lam) * 1
    assert torch.allclose(mixed[1], torch.full((3, 8, 8), lam))  # lam * 1 + (1 - lam) * 0
    assert torch.allclose(soft, torch.tensor([[lam, 1 - lam, 0.0], [1 - lam, lam, 0.0]]))


def test_cutmix_pastes_a_box_and_weights_the_labels_by_its_area():
    torch.manual_seed(3)
    images, labels = two_images()
    mixed, soft = build_mix(None, 1.0, num_classes=2)(images, labels)
    pasted = mixed[0, 0].sum().item()  # image 0's pixels that now come from image 1 (value 1)
    assert 0 < pasted < 64
    assert torch.equal(mixed[0], mixed[0, :1].expand(3, 8, 8))  # the same box in every channel
    assert soft[0, 1].item() == pytest.approx(pasted / 64)  # label weight = the box's share of the image
    assert soft[1, 0].item() == pytest.approx((64 - mixed[1, 0].sum().item()) / 64)
    assert torch.allclose(soft.sum(1), torch.ones(2))


def test_the_classification_loss_takes_soft_targets_with_label_smoothing():
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    soft = torch.tensor([[0.7, 0.3, 0.0]])
    log_p = torch.log_softmax(logits, 1)
    assert Classification().loss(logits, soft).item() == pytest.approx(-(soft * log_p).sum().item(), rel=1e-6)
    smoothed = soft * (1 - 0.1) + 0.1 / 3  # label smoothing mixes in the uniform distribution
    assert Classification(label_smoothing=0.1).loss(logits, soft).item() == pytest.approx(
        -(smoothed * log_p).sum().item(), rel=1e-6)


def test_mixup_is_refused_for_a_task_without_soft_targets():
    from types import SimpleNamespace

    cfg = SimpleNamespace(mixup_alpha=0.2, cutmix_alpha=None)
    with pytest.raises(ConfigError, match="task=lm cannot take"):
        build_batch_recipe(cfg, None, LanguageModelling(), "lm", None, 100)
    assert type(build_batch_recipe(cfg, None, Classification(), "classification", 4, 100).mix).__name__ == "MixUp"
    with pytest.raises(ConfigError, match="number of classes"):
        build_batch_recipe(cfg, None, Classification(), "classification", None, 100)
    no_mix = SimpleNamespace(mixup_alpha=None, cutmix_alpha=None)
    with pytest.raises(ConfigError, match="data.resize_schedule works on batches of images, and dataset=tokens"):
        build_batch_recipe(no_mix, [(0.0, 16)], LanguageModelling(), "lm", None, 100, "tokens", images=False)
    assert build_batch_recipe(no_mix, None, Classification(), "classification", 4, 100) is None


def test_the_resize_schedule_changes_size_at_its_fractions_of_the_run():
    steps = resize_steps(resize_schedule([[0, 16], [0.5, 24], [0.75, 32]]), total_steps=10)
    assert steps == [(0, 16), (5, 24), (7, 32)]  # fraction x total steps, rounded down
    assert [size_at(steps, s) for s in range(10)] == [16] * 5 + [24] * 2 + [32] * 3


def test_resize_is_antialiased_bilinear_by_hand():
    # The row 0 0 0 0 8 8 8 8 halved. Output pixel j is centred on input 2j + 0.5 and weighs the input
    # pixels x within 2 of it by the triangle 1 - |x - centre| / 2 (renormalised over the pixels that
    # exist): j=0 -> x 0,1,2 (0.75, 0.75, 0.25), all 0 -> 0; j=1 -> x 1..4 (0.25, 0.75, 0.75, 0.25) ->
    # 0.25 * 8 / 2 = 1; j=2 -> x 3..6 -> (0.75 + 0.75 + 0.25) * 8 / 2 = 7; j=3 -> x 5,6,7, all 8 -> 8.
    row = torch.tensor([0, 0, 0, 0, 8, 8, 8, 8], dtype=torch.float32)
    out = resize(row.expand(8, 8).reshape(1, 1, 8, 8), 4)
    assert out.shape == (1, 1, 4, 4)
    assert torch.allclose(out[0, 0], torch.tensor([0.0, 1.0, 7.0, 8.0]).expand(4, 4), atol=1e-5)


def test_training_batches_follow_the_schedule():
    recipe = BatchRecipe(resize_at=[(0, 8), (5, 12)])
    images = torch.rand(2, 3, 16, 16)
    assert recipe.train(images, torch.tensor([0, 1]), step=4)[0].shape[-1] == 8
    assert recipe.train(images, torch.tensor([0, 1]), step=5)[0].shape[-1] == 12
    with pytest.raises(ConfigError, match="batches of images"):
        recipe.train(torch.rand(2, 5), torch.tensor([0, 1]), step=0)


def test_a_schedule_not_ending_at_the_datasets_size_is_evaluated_at_the_datasets_size(tmp_path):
    """metrics.json's held-out numbers are those fastpipe.evaluate gives on the saved weights (the dataset's
    size), never the last size of a schedule that ends elsewhere; a warning says so."""
    from omegaconf import OmegaConf

    from fastpipe.cli.evaluate import evaluate_run

    from conftest import RESUMABLE, compose, run_in_process

    overrides = RESUMABLE + ["train.max_steps=4", "data.resize_schedule=[[0,16],[0.5,8]]"]
    m = run_in_process(tmp_path, overrides)
    assert ("data.resize_schedule ends at 8 px and the dataset's images are 16 px: held-out evaluations "
            "(metrics.json, train.target, best.pt) run at the dataset's 16 px") in " ".join(m["warnings"])
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(compose(overrides), tmp_path / ".hydra" / "config.yaml")  # what the entry point records
    again = evaluate_run(tmp_path, [], weights="last", device="cpu")["metrics"]
    assert again["accuracy"] == m["accuracy"] and again["loss"] == pytest.approx(m["val_loss"], rel=1e-6)


@pytest.mark.parametrize("value, problem", [([[0.1, 16]], "start at 0"), ([[0, 16], [0, 24]], "start at 0"),
                                             ([[0, 16], [1.0, 24]], "below 1"), ([[0, 4]], ">= 8"),
                                             ([[0, 8], [0.2, 10], [0.4, 12], [0.6, 14], [0.8, 16]], "more than 4"),
                                             ("16", "list of")])
def test_a_bad_resize_schedule_is_refused_in_one_line(value, problem):
    with pytest.raises(ConfigError, match=problem):
        resize_schedule(value)
