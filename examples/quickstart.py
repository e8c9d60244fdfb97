"""The seed snippet: define-by-run gradients, then the same graph lowered to JAX."""
import dynajax as dj

x = dj.tensor(1.0, requires_grad=True)
y = dj.tensor(2.0, requires_grad=True)
z = x + y
z.backward()
print(x.grad)

# The same function, lowered once to a pure JAX function and differentiated by jax.grad.
try:
    import jax

    lowered = dj.lower(lambda a, b: a + b, x, y)
    gx = jax.grad(lowered.fn, argnums=0)(x.detach()._value, y.detach()._value)
    print("jax.grad of the lowered graph:", float(gx))
except AttributeError:  # dj.lower arrives with the lowering engine
    pass
