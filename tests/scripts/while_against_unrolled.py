"""Run by tests/test_steps_per_execution.py in a fresh process (XLA's device count and mode are fixed for a process's life)."""

import torch
import torch_xla
from torch_xla.debug import metrics as met
from xla_train.objective import masked_stats
from xla_train.runtime.torch_xla.backend import XLA

device_data = XLA.to_device
from xla_train.runtime.torch_xla.step_program import StepProgram

dev = torch_xla.device()
torch.manual_seed(0)
images, labels = torch.randn(50, 3, 8, 8).to(dev), torch.randint(0, 4, (50,)).to(dev)  # resident data: constants
conv, lin = torch.nn.Conv2d(3, 4, 3).to(dev), torch.nn.Linear(4 * 9, 4).to(dev)
# each epoch's order, (6 rows, 4 steps), on the device once: a shared input of the program
orders = [
    device_data(torch.randperm(50, generator=torch.Generator().manual_seed(e))[:24].view(4, 6).T.contiguous(), dev)
    for e in range(2)
]
order = orders[0]


def step(state, batch, scalars):  # one SGD step of a conv net on a gathered batch, with dropout and metric sums
    *params, sums, seen = state
    (i,) = batch  # the step's number: its rows are that column of the epoch's order
    idx = order.index_select(1, i.unsqueeze(0)).squeeze(1)  # order[:, i] would read i on the host (.item())
    y = torch.nn.functional.conv2d(images[idx], params[0], params[1]).relu()[:, :, ::2, ::2][:, :, :3, :3]
    y = torch.nn.functional.dropout(y.flatten(1), 0.3, training=True)
    loss, stats = masked_stats(torch.nn.functional.linear(y, params[2], params[3]), labels[idx])
    grads = torch.autograd.grad(loss, params)
    return [p - scalars[0] * g for p, g in zip(params, grads)] + [sums + stats.detach(), seen + idx.sum()]


out = {}
for loop in ("unroll", "while"):
    state = [p.detach().clone().requires_grad_() for p in (conv.weight, conv.bias, lin.weight, lin.bias)]
    state += [torch.zeros(3).to(dev), device_data(torch.tensor(0), dev)]  # metric sums; the indices read
    steps = [device_data(torch.tensor(i), dev) for i in range(4)]  # as the loader sends them: data
    rate = torch.tensor([0.5]).to(dev)
    torch_xla.sync()
    program = StepProgram(4, loop)
    program.build(step, state, [steps[0]], rate, shared=[orders[0]])
    compiles = []
    for n, epoch in ((4, 0), (3, 0), (1, 1)):  # a full group, then remainders, then the next epoch's order
        state = program.run(
            state, [[i] for i in steps], n, [[0.5], [0.4], [0.3], [0.2]], [11, 22, 33, 44], shared=[orders[epoch]]
        )
        torch_xla.sync()
        compiles.append(met.metric_data("CompileTime")[0])
    out[loop] = [t.cpu() for t in state]
    print(loop, "steps counted", int(out[loop][-2][2]) // 6)
    print(loop, "compiled after the first execution", compiles[-1] - compiles[0])
    expected = int(orders[0][:, :4].sum() + orders[0][:, :3].sum() + orders[1][:, :1].sum())
    print(loop, "read each epoch's order", int(out[loop][-1]) == expected)
for a, b in zip(out["unroll"], out["while"]):
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
print("equal")
