"""runtime/torch_xla/optimizer_state.py: the state made before the first step is torch's own, and on XLA the first step then
runs the program every later step runs."""

import pytest
import torch
from torch import nn

from helpers import SCRIPTS, script_json
from xla_train.runtime.torch_xla.optimizer_state import prime_optimizer_state

OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),
    "adam_single": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False),
    "adamw_decay": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=1e-3),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, foreach=True),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-3),
}


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def _train(opt_of, prime: bool, steps: int = 4):
    net = _net()
    opt = opt_of(net.parameters())
    sent = prime_optimizer_state(opt, lambda ts: [t.clone() for t in ts]) if prime else None
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        opt.zero_grad()
        net(torch.randn(8, 5, generator=gen)).pow(2).mean().backward()
        opt.step()
    return net, opt, sent


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_primed_state_gives_torchs_steps_bit_for_bit(name):
    plain, plain_opt, _ = _train(OPTIMIZERS[name], prime=False)
    primed, primed_opt, sent = _train(OPTIMIZERS[name], prime=True)
    assert sent > 0
    for a, b in zip(plain.parameters(), primed.parameters()):
        assert torch.equal(a, b)
    for p, q in zip(plain.parameters(), primed.parameters()):
        sa, sb = plain_opt.state[p], primed_opt.state[q]
        assert sa.keys() == sb.keys()
        for key in sa:
            assert sa[key].dtype == sb[key].dtype and sa[key].device == sb[key].device, key
            assert torch.equal(sa[key], sb[key]), key


def test_the_state_is_what_torchs_first_step_makes_before_any_step():
    net = _net()
    opt = torch.optim.Adam(net.parameters(), amsgrad=True)
    sent = []
    assert prime_optimizer_state(opt, lambda ts: sent.extend(ts) or ts) == 3 * 4  # three moments, four params
    for p in net.parameters():
        state = opt.state[p]
        assert set(state) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
        assert state["step"].dim() == 0 and state["step"].dtype == torch.float32 and float(state["step"]) == 0
        assert not any(state["step"] is t for t in sent)  # torch keeps the count on the host: not sent
        assert all(state[k].shape == p.shape and not state[k].any() for k in ("exp_avg", "exp_avg_sq"))


def test_frozen_resumed_and_unknown_are_left_alone():
    net = _net()
    net[0].weight.requires_grad_(False)
    opt = torch.optim.Adam(net.parameters())
    resumed = {"step": torch.tensor(5.0), "exp_avg": torch.ones(3), "exp_avg_sq": torch.ones(3)}
    opt.state[net[2].bias] = dict(resumed)
    assert prime_optimizer_state(opt, lambda ts: ts) == 2 * 2  # net[0].bias and net[2].weight only
    assert net[0].weight not in opt.state
    assert opt.state[net[2].bias] == resumed
    damped = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, dampening=0.5)  # its first step differs
    plain = torch.optim.SGD(net.parameters(), lr=0.1)  # no state at all
    rms = torch.optim.RMSprop(net.parameters())
    capturable = torch.optim.Adam(net.parameters(), capturable=True)  # its count on the device: torch's own way
    optimizers = (damped, plain, rms, capturable)
    assert [prime_optimizer_state(o, lambda ts: ts) for o in optimizers] == [0, 0, 0, 0]
    assert not any(o.state for o in optimizers)


def test_the_first_xla_step_runs_the_program_of_every_later_step():
    """On XLA, unprimed, torch's first Adam step made its moments inside the step's graph, constants rather than
    inputs: a program of its own, compiled for that step alone, and the
    second step compiled another. Primed, the steps compute the same parameters with one program."""
    seen = script_json(SCRIPTS / "optimizer_state_on_xla.py")
    assert seen["False"] == {"plain": 2, "primed": 1, "sent": 8, "same": True}, seen
    assert seen["True"] == {"plain": 2, "primed": 1, "sent": 12, "same": True}, seen
