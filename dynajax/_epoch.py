"""A process-wide count of changes to *which* tensors hold models' and optimizers' state.

Bumped when a module gains, loses or replaces a parameter, buffer or submodule, when a tensor's
``.data`` is rebound or its ``requires_grad`` flips (a layer frozen), and when an optimizer loads a
state dict or gains a param group. A replayed
compiled call (``compile.replay``) reads its inputs from the tensors its recording read; after a bump it is
recorded again, so it finds the tensors that hold the state now.
"""
COUNT = [0]


def bump() -> None:
    COUNT[0] += 1
