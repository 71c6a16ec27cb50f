"""The Keras CIFAR-10 CNN, layer for layer, as a plain nn.Module.

Kept free of Lightning and torch_xla so that a checkpoint can be served by
anything that has torch: the same class trains on a TPU and predicts on a laptop.
"""

from torch import nn

from xla_train.errors import require_positive, require_probability


class CifarCNN(nn.Module):
    arch = "cnn"

    def __init__(self, num_classes: int = 10, dropout: float = 0.25, dense_dropout: float = 0.5):
        super().__init__()
        require_positive("model.net.", num_classes=num_classes)
        require_probability("model.net.", dropout=dropout, dense_dropout=dense_dropout)
        self.features = nn.Sequential(
            nn.BatchNorm2d(3),
            nn.Conv2d(3, 32, 3, padding="same"),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding="same"),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(dropout),
            nn.BatchNorm2d(32),
            nn.Conv2d(32, 64, 3, padding="same"),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3),
            nn.ReLU(),  # Keras `valid`: 16x16 -> 14x14
            nn.MaxPool2d(2),
            nn.Dropout(dropout),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 512),
            nn.ReLU(),
            nn.Dropout(dense_dropout),
            nn.Linear(512, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))
