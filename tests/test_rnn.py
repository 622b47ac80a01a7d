"""Recurrent layers on `neuron` against CPU PyTorch: nn.LSTM, nn.GRU, nn.LSTMCell and
nn.GRUCell run through the fused cell kernels (`_thnn_fused_{lstm,gru}_cell` and their
backward); outputs and gradients of the input and every parameter must match CPU."""
import pytest
import torch
import torch.nn as nn
from torch.func import functional_call

from helpers import check, no_fallback

TOL = dict(atol=1e-5, rtol=1e-5)


def run_module(module, backward=True):
    """fn(x, params, *state) -> (outputs, grads of x and of each parameter), running
    `module` functionally with `params` on whatever device they are on. A fixed
    pseudo-random cotangent is back-propagated from every floating output."""
    names = [n for n, _ in module.named_parameters()]

    def fn(x, params, *state):
        x = x.detach().requires_grad_()
        params = {n: params[n].detach().requires_grad_() for n in names}
        args = (x,) + ((state[0] if len(state) == 1 else tuple(state)),) if state else (x,)
        out = functional_call(module, params, args)
        flat = []
        stack = [out]
        while stack:
            o = stack.pop(0)
            if isinstance(o, tuple):
                stack[:0] = list(o)
            elif isinstance(o, nn.utils.rnn.PackedSequence):
                flat.append(o.data)
            else:
                flat.append(o)
        if not backward:
            return flat
        loss = sum((t * torch.linspace(-1, 1, t.numel()).sin().reshape(t.shape).to(t.device)).sum() for t in flat)
        gs = torch.autograd.grad(loss, [x] + [params[n] for n in names])
        return flat, list(gs)

    return fn


def params_of(module):
    return {n: p.detach().clone() for n, p in module.named_parameters()}


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_lstm(bidirectional, batch_first):
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=bidirectional, batch_first=batch_first)
    x = torch.randn(2, 5, 3) if batch_first else torch.randn(5, 2, 3)
    check(run_module(m), x, params_of(m), **TOL)
    d = 2 if bidirectional else 1
    h0, c0 = torch.randn(2 * d, 2, 4), torch.randn(2 * d, 2, 4)
    check(run_module(m), x, params_of(m), h0, c0, **TOL)


def test_lstm_no_bias_proj():
    m = nn.LSTM(3, 5, num_layers=2, bias=False, proj_size=2)
    check(run_module(m), torch.randn(4, 3, 3), params_of(m), **TOL)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_gru(bidirectional, batch_first):
    m = nn.GRU(3, 4, num_layers=2, bidirectional=bidirectional, batch_first=batch_first)
    x = torch.randn(2, 5, 3) if batch_first else torch.randn(5, 2, 3)
    check(run_module(m), x, params_of(m), **TOL)
    h0 = torch.randn(2 * (2 if bidirectional else 1), 2, 4)
    check(run_module(m), x, params_of(m), h0, **TOL)


def test_gru_no_bias():
    m = nn.GRU(3, 4, bias=False)
    check(run_module(m), torch.randn(4, 2, 3), params_of(m), **TOL)


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell(bias):
    m = nn.LSTMCell(3, 4, bias=bias)
    x = torch.randn(2, 3)
    check(run_module(m), x, params_of(m), **TOL)
    check(run_module(m), x, params_of(m), torch.randn(2, 4), torch.randn(2, 4), **TOL)


@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell(bias):
    m = nn.GRUCell(3, 4, bias=bias)
    x = torch.randn(2, 3)
    check(run_module(m), x, params_of(m), **TOL)
    check(run_module(m), x, params_of(m), torch.randn(2, 4), **TOL)


def test_lstm_cell_unused_cell_state():
    """Only hy feeds the loss: grad_cy arrives undefined in the fused backward."""
    m = nn.LSTMCell(3, 4)

    def fn(x, params):
        x = x.detach().requires_grad_()
        params = {n: p.detach().requires_grad_() for n, p in params.items()}
        hy, _ = functional_call(m, params, (x,))
        return hy, torch.autograd.grad(hy.sum(), [x] + list(params.values()))

    check(fn, torch.randn(2, 3), params_of(m), **TOL)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_packed_sequence(cls):
    m = cls(3, 4, num_layers=2, bidirectional=True)
    lengths = torch.tensor([5, 3, 2])

    def packed_fn(x, params):
        names = [n for n, _ in m.named_parameters()]
        x = x.detach().requires_grad_()
        params = {n: params[n].detach().requires_grad_() for n in names}
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, hidden = functional_call(m, params, (packed,))
        padded, _ = nn.utils.rnn.pad_packed_sequence(out)
        hs = list(hidden) if isinstance(hidden, tuple) else [hidden]
        loss = sum((t * torch.linspace(-1, 1, t.numel()).sin().reshape(t.shape).to(t.device)).sum()
                   for t in [padded] + hs)
        return [padded] + hs, list(torch.autograd.grad(loss, [x] + [params[n] for n in names]))

    check(packed_fn, torch.randn(5, 3, 3), params_of(m), **TOL)


def test_module_to_neuron_training_step():
    """The reported case: a module moved to neuron, forward, backward, SGD step."""
    torch.manual_seed(0)
    cpu = nn.LSTM(2, 3)
    dev = nn.LSTM(2, 3)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("neuron")
    x = torch.randn(4, 1, 2)
    with no_fallback():
        for m, xx in ((cpu, x), (dev, x.to("neuron"))):
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            out, _ = m(xx)
            out.square().sum().backward()
            opt.step()
    for (n, a), b in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), **TOL, msg=n)
    with no_fallback():
        out = dev(torch.ones(4, 1, 2, device="neuron"))[0]
    torch.testing.assert_close(out.cpu(), cpu(torch.ones(4, 1, 2))[0].detach(), **TOL)


def test_double_backward_lstm_cell():
    """create_graph=True: autograd uses the differentiable (composite) cell backward."""
    m = nn.LSTMCell(3, 4)

    def fn(x, params):
        x = x.detach().requires_grad_()
        params = {n: p.detach().requires_grad_() for n, p in params.items()}
        hy, cy = functional_call(m, params, (x,))
        (gx,) = torch.autograd.grad((hy * cy).sum(), [x], create_graph=True)
        return gx, torch.autograd.grad(gx.square().sum(), list(params.values()))

    check(fn, torch.randn(2, 3), params_of(m), **TOL)
