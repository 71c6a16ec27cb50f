"""steps_per_execution's optimizer update, written out as a pure function (runtime/torch_xla/engine.py runs it), against torch.optim.

The K-step program cannot call `optimizer.step()`: it carries the update itself.
These run that function on the CPU, step by step (K=1), beside the torch.optim
optimizer it stands for, over every option it accepts, and check that it refuses
every option it does not compute in one line.
"""

import itertools

import pytest
import torch

from xla_train.errors import ConfigError
from xla_train.runtime.functional_optimizer import FunctionalOptimizer

STEPS = 4  # Adam's bias correction and SGD's momentum buffer both change over the first steps


def params():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(5, 3, generator=g), torch.randn(3, generator=g)]


def run_both(make, foreach: bool):
    """(torch.optim's parameters and state, the functional update's) after STEPS steps on the same gradients."""
    ref = [p.clone().requires_grad_() for p in params()]
    ours = [p.clone().requires_grad_() for p in params()]
    opt_ref = make(ref, foreach)
    opt_ours = make(ours, foreach)
    functional = FunctionalOptimizer(opt_ours)
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        grads = [torch.randn(p.shape, generator=g) for p in ref]
        for p, grad in zip(ref, grads):
            p.grad = grad.clone()
        opt_ref.step()
        scalars = torch.tensor(functional.scalars(functional.steps_done + 1), dtype=torch.float32)
        new_params, new_state = functional.update([p.detach() for p in ours], grads, functional.state(), scalars)
        with torch.no_grad():
            for p, new in zip(ours, new_params):
                p.copy_(new)
        functional.store(new_state, 1)
    return (ref, opt_ref), (ours, opt_ours)


ADAM = [
    dict(lr=lr, betas=betas, eps=eps, weight_decay=wd)
    for lr, betas, eps, wd in itertools.product((1e-3, 0.05), ((0.9, 0.999), (0.8, 0.95)), (1e-8, 1e-3), (0.0, 0.1))
]
SGD = [
    dict(lr=lr, momentum=m, nesterov=n, weight_decay=wd)
    for lr, m, n, wd in itertools.product((0.1, 0.01), (0.0, 0.9), (False, True), (0.0, 5e-4))
    if m or not n
]


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
@pytest.mark.parametrize(
    "kind, options",
    [("adam", o) for o in ADAM] + [("sgd", o) for o in SGD],
    ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={v[k]}" for k in v),
)
def test_the_update_is_torch_optims_step_for_every_option_it_accepts(kind, options, foreach):
    cls = torch.optim.Adam if kind == "adam" else torch.optim.SGD
    (ref, opt_ref), (ours, opt_ours) = run_both(lambda ps, fe: cls(ps, foreach=fe, **options), foreach)
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    for p_ref, p_ours in zip(ref, ours):  # the optimizer's own state: a checkpoint looks the same whatever K wrote it
        s_ref, s_ours = opt_ref.state[p_ref], opt_ours.state[p_ours]
        assert s_ref.keys() == s_ours.keys(), (s_ref.keys(), s_ours.keys())
        for k in s_ref:
            torch.testing.assert_close(s_ours[k].float(), s_ref[k].float(), atol=1e-6, rtol=1e-5, msg=k)


@pytest.mark.parametrize(
    "make, refused",
    [
        (lambda ps: torch.optim.Adam(ps, amsgrad=True), "amsgrad=True"),
        (lambda ps: torch.optim.Adam(ps, maximize=True), "maximize=True"),
        (lambda ps: torch.optim.Adam(ps, decoupled_weight_decay=True, weight_decay=0.1), "decoupled_weight_decay=True"),
        (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1), "dampening=0.1"),
        (lambda ps: torch.optim.SGD(ps, lr=0.1, maximize=True), "maximize=True"),
        (lambda ps: torch.optim.AdamW(ps), "AdamW"),
        (lambda ps: torch.optim.RMSprop(ps), "RMSprop"),
        (lambda ps: torch.optim.SGD([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.5}], lr=0.1), "2 parameter groups"),
    ],
    ids=["amsgrad", "adam-maximize", "decoupled", "dampening", "sgd-maximize", "adamw", "rmsprop", "groups"],
)
def test_what_the_update_does_not_compute_is_refused_in_one_line(make, refused):
    with pytest.raises(ConfigError) as e:
        FunctionalOptimizer(make([p.clone().requires_grad_() for p in params()]))
    message = str(e.value)
    assert refused in message and "\n" not in message, message
