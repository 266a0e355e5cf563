"""PackedSequence inputs: a padded batch plus per-pair lengths, in the order the pairs were packed.

``torch.nn.utils.rnn.pack_sequence`` / ``pack_padded_sequence`` give a
:class:`~torch.nn.utils.rnn.PackedSequence`; the public functions accept one for x and/or y and read it
as the padded batch `(B, T, D)` with its lengths `(B,)`. ``pad_packed_sequence`` applies the pack's
``unsorted_indices``, so a pack made with ``enforce_sorted=False`` keeps pair b as pair b. It is
differentiable: gradients reach the pack's ``data``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch.nn.utils.rnn import PackedSequence, pad_packed_sequence


def unpack(t, lengths, name: str, lengths_name: str) -> Tuple[object, Optional[torch.Tensor]]:
    """``(t, lengths)`` unchanged unless ``t`` is a PackedSequence; then ``(padded, lengths)``.

    padded is `(B, T, D)` with T the longest series (a pack of 1-D series `(T_b,)` gives D = 1);
    lengths is int64 `(B,)` on the CPU, in the packing order of the series.
    """
    if not isinstance(t, PackedSequence):
        return t, lengths
    if lengths is not None:
        raise ValueError(
            f"{name} is a PackedSequence, which carries its own lengths, and {lengths_name} was given too. "
            f"Drop {lengths_name}, or pass {name} as a padded tensor (B, T, D) with {lengths_name}."
        )
    padded, lens = pad_packed_sequence(t, batch_first=True)
    if padded.dim() == 2:  # a pack of univariate series of shape (T_b,)
        padded = padded.unsqueeze(-1)
    return padded, lens
