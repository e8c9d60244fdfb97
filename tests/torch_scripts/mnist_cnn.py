"""A digit classifier in the style of the classic MNIST example: two convolutions, max pooling,
dropout, two linear layers, log-softmax + NLL loss, Adadelta with a StepLR schedule.
The "images" are synthetic 28x28 blobs made with numpy (one class per blob position)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

from _common import numpy_init, parser, report


class Net(nn.Module):
    def __init__(self, dropout: float = 0.0):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.fc1 = nn.Linear(16 * 12 * 12, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def synthetic_digits(n: int, seed: int):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=n)
    images = rng.normal(0.0, 0.3, size=(n, 1, 28, 28)).astype(np.float32)
    for i, c in enumerate(labels):
        r, q = divmod(int(c), 5)
        images[i, 0, 4 + 12 * r:12 + 12 * r, 2 + 5 * q:6 + 5 * q] += 1.0
    images = (images - 0.1307) / 0.3081
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


def train(args, model, device, train_loader, optimizer, scheduler, step):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        if step >= args.steps:
            break
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        report(step, loss.item())
        step += 1
    scheduler.step()
    return step


def test(model, device, loader):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(loader.dataset), correct


def main():
    p = parser("MNIST-style CNN")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--no-accel", action="store_true")
    args = p.parse_args()
    use_accel = not args.no_accel and torch.accelerator.is_available()
    device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = False

    x, y = synthetic_digits(64, args.seed)
    train_loader = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=args.batch_size, shuffle=False)
    test_loader = DataLoader(TensorDataset(x[48:], y[48:]), batch_size=8)

    model = Net().to(device)
    numpy_init(model, args.seed)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    step = 0
    while step < args.steps:
        step = train(args, model, device, train_loader, optimizer, scheduler, step)
    test_loss, correct = test(model, device, test_loader)
    print(f"test loss {test_loss!r} correct {correct}")
    print(f"lr {scheduler.get_last_lr()[0]!r}")


if __name__ == "__main__":
    main()
