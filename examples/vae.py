"""A variational autoencoder on 8x8 "bars" images, with a checkpoint saved, reloaded and resumed.

Each image is drawn by the script: one to three random full rows or columns
switched on, with a little pixel noise. The encoder maps an image to the mean
and log-variance of a Gaussian over a 4-d latent; the reparameterisation trick
(``z = mu + eps * std`` with ``eps = randn``) keeps the sample differentiable;
the decoder gives Bernoulli logits per pixel. The loss is the negative ELBO
(reconstruction cross-entropy + KL to the unit Gaussian), printed per image in
nats as the ELBO rises. The checkpoint holds the model, the optimizer, the step
and the random-number state (the next step draws fresh ``eps``), so two steps
after reloading give exactly the losses of two steps without stopping; the
script asserts this.

With the defaults the held-out ELBO rises from about -45 to about -24 nats per
image in 600 steps.

    python examples/vae.py [--steps 600] [--checkpoint-dir DIR] [--device cpu]
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

import _cli  # --steps/--device flags shared by the examples
import dynajax as dj
import dynajax.nn.functional as F
from dynajax import nn

SIDE = 8


def make_batch(n: int, rng: np.random.Generator, device="cpu"):
    """``n`` binary bar images, flattened to shape (n, 64)."""
    images = np.zeros((n, SIDE, SIDE), np.float32)
    for image in images:
        for _ in range(rng.integers(1, 4)):
            if rng.random() < 0.5:
                image[rng.integers(SIDE), :] = 1
            else:
                image[:, rng.integers(SIDE)] = 1
    flip = rng.random(images.shape) < 0.02
    images = np.where(flip, 1 - images, images)
    return dj.tensor(images.reshape(n, SIDE * SIDE), device=device)


class VAE(nn.Module):
    def __init__(self, latent: int = 4, hidden: int = 128) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(SIDE * SIDE, hidden), nn.ReLU(), nn.Linear(hidden, 2 * latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, SIDE * SIDE))

    def forward(self, x, generator=None):
        """Pixel logits of a reconstruction of ``x``, and the posterior mean and log-variance."""
        mu, logvar = self.encoder(x).chunk(2, dim=1)
        std = (0.5 * logvar).exp()
        eps = dj.randn(std.shape, generator=generator)   # the reparameterisation trick
        return self.decoder(mu + eps * std), mu, logvar


def negative_elbo(model: nn.Module, x, generator=None):
    """The negative ELBO per image, in nats: Bernoulli reconstruction loss plus KL(q(z|x) || N(0, I))."""
    logits, mu, logvar = model(x, generator)
    reconstruction = F.binary_cross_entropy_with_logits(logits, x, reduction="sum")
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum()
    return (reconstruction + kl) / x.shape[0]


def train_step(model: nn.Module, opt: dj.optim.Optimizer, x) -> float:
    """One optimizer step on ``x`` with fresh noise from the default stream; returns its loss."""
    opt.zero_grad()
    loss = negative_elbo(model, x)
    loss.backward()
    opt.step()
    return loss.item()


def elbo(model: nn.Module, x, seed: int = 0) -> float:
    """The ELBO per image on ``x``, with noise from its own seeded generator (leaves the default stream alone)."""
    with dj.no_grad():
        return -negative_elbo(model, x, dj.Generator().manual_seed(seed)).item()


def main(steps: int = 600, checkpoint_dir: str | None = None, device="cpu", seed: int = 0, batch: int = 64,
         test_size: int = 1000, lr: float = 3e-3, verbose: bool = True) -> dict:
    """Train, save a checkpoint, check that resuming from it matches continuing; return the ELBOs."""
    dj.manual_seed(seed)
    batch_for = lambda step: make_batch(batch, np.random.default_rng([seed, step]), device)  # noqa: E731
    test = make_batch(test_size, np.random.default_rng([seed, 10**9]), device)
    model = VAE().to(device)
    opt = dj.optim.Adam(model.parameters(), lr=lr)
    elbo_before = elbo(model, test)
    if verbose:
        print(f"step    0  held-out ELBO {elbo_before:.2f} nats/image")
    for step in range(1, steps + 1):
        loss = train_step(model, opt, batch_for(step))
        if verbose and (step % 100 == 0 or step == steps):
            print(f"step {step:4d}  train ELBO {-loss:.2f}  held-out ELBO {elbo(model, test):.2f} nats/image")
    elbo_after = elbo(model, test)

    tmp = tempfile.TemporaryDirectory() if checkpoint_dir is None else None
    path = os.path.join(checkpoint_dir or tmp.name, "vae.ckpt")
    dj.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": steps,
             "rng": dj.get_rng_state().numpy()}, path)
    continued = [train_step(model, opt, batch_for(steps + i)) for i in (1, 2)]

    checkpoint = dj.load(path)
    resumed_model = VAE().to(device)
    resumed_opt = dj.optim.Adam(resumed_model.parameters(), lr=lr)
    resumed_model.load_state_dict(checkpoint["model"])
    resumed_opt.load_state_dict(checkpoint["optim"])
    dj.set_rng_state(checkpoint["rng"])
    resumed = [train_step(resumed_model, resumed_opt, batch_for(checkpoint["step"] + i)) for i in (1, 2)]
    if tmp is not None:
        tmp.cleanup()
    assert np.allclose(resumed, continued, rtol=1e-6, atol=1e-6), (continued, resumed)
    if verbose:
        print(f"held-out ELBO {elbo_before:.2f} -> {elbo_after:.2f} nats/image")
        print(f"resume check: next-step losses continuing {continued[0]:.4f}, {continued[1]:.4f}; "
              f"resumed from {path}: {resumed[0]:.4f}, {resumed[1]:.4f}")
    return {"elbo_before": elbo_before, "elbo_after": elbo_after, "continued": continued, "resumed": resumed}


def parse_args(argv=None):
    """Command-line flags (see _cli.py), plus ``--checkpoint-dir``."""
    ap = _cli.parser(__doc__, steps=600)
    ap.add_argument("--checkpoint-dir", default=None, help="where to write the checkpoint (default: a temp dir)")
    return _cli.parse(ap, argv)


if __name__ == "__main__":
    args = parse_args()
    main(args.steps, args.checkpoint_dir, args.device)
