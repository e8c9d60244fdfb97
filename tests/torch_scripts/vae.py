"""A variational autoencoder in the style of the classic VAE example: an MLP encoder to a mean and
log-variance, the reparameterization trick, an MLP decoder with a sigmoid, binary cross-entropy plus
the KL divergence, Adam. The noise of the reparameterization comes from numpy (so that two runs on
different engines draw the same numbers), the "images" are synthetic strokes in [0, 1]."""
import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from _common import numpy_init, parser, report


class VAE(nn.Module):
    def __init__(self, pixels=196, hidden=64, latent=8):
        super(VAE, self).__init__()
        self.pixels = pixels
        self.fc1 = nn.Linear(pixels, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, pixels)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps):
        std = torch.exp(0.5 * logvar)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x, eps):
        mu, logvar = self.encode(x.view(-1, self.pixels))
        z = self.reparameterize(mu, logvar, eps)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar, pixels):
    """Reconstruction + KL divergence losses summed over all elements and batch."""
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, pixels), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def strokes(n, side, seed):
    rng = np.random.RandomState(seed)
    img = np.zeros((n, 1, side, side), np.float32)
    for i in range(n):
        r = rng.randint(2, side - 2)
        img[i, 0, r, 2:side - 2] = 1.0
        img[i, 0, 2:side - 2, rng.randint(2, side - 2)] = 0.8
    return np.clip(img + rng.uniform(0, 0.1, img.shape).astype(np.float32), 0, 1)


def main():
    p = parser("VAE")
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    side = 14
    data = torch.from_numpy(strokes(64, side, args.seed))
    loader = DataLoader(TensorDataset(data), batch_size=args.batch_size, shuffle=False)
    model = VAE(pixels=side * side).to(device)
    numpy_init(model, args.seed)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    noise = np.random.RandomState(args.seed + 1)
    step = 0
    while step < args.steps:
        model.train()
        for (x,) in loader:
            if step >= args.steps:
                break
            x = x.to(device)
            eps = torch.from_numpy(noise.standard_normal((x.shape[0], 8)).astype(np.float32))
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(x, eps)
            loss = loss_function(recon_batch, x, mu, logvar, side * side)
            loss.backward()
            optimizer.step()
            report(step, loss.item() / len(x))
            step += 1
    model.eval()
    with torch.no_grad():
        sample = model.decode(torch.zeros(2, 8, device=device))
        print(f"sample mean {sample.mean().item()!r}")


if __name__ == "__main__":
    main()
