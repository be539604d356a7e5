"""The figure of one fine-tuning task (results' `epochs` PNG): dev accuracy and train loss per epoch."""
from __future__ import annotations

from typing import Sequence

import matplotlib.figure
import matplotlib.ticker
import numpy as np


def epoch_curve_figure(task_name: str, dev_accuracy: Sequence[float], train_loss: Sequence[float],
                       best_epoch: int) -> matplotlib.figure.Figure:
    """Dev accuracy and train loss per epoch (numbered from 1), best epoch marked."""
    epochs = np.arange(1, len(dev_accuracy) + 1)
    figure = matplotlib.figure.Figure(figsize=(6, 3.5))
    acc_axes = figure.add_subplot()
    acc_axes.plot(epochs, dev_accuracy, "o-", color="#4c72b0", label="dev accuracy")
    acc_axes.axvline(best_epoch, color="grey", linestyle="--", linewidth=1)
    acc_axes.set_xlabel("epoch")
    acc_axes.set_ylabel("dev accuracy")
    acc_axes.set_ylim(0, 1)
    loss_axes = acc_axes.twinx()
    loss_axes.plot(epochs, train_loss, "s-", color="#dd8452", label="train loss")
    loss_axes.set_ylabel("train loss")
    acc_axes.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    figure.legend(loc="lower right", fontsize="small")
    acc_axes.set_title(f"{task_name}: best epoch {best_epoch} ({dev_accuracy[best_epoch - 1]:.4f})")
    figure.tight_layout()
    return figure
