"""Round-to-nearest quantizers to ggml's K-quants Q4_K and Q6_K, for writing test models.

gguf-py decodes these types but cannot encode them. These follow the block layouts (ggml's
block_q4_K and block_q6_K) without ggml's search for better scales: enough for a model whose
values the tests then read back through gguf.quants.dequantize, the reference both sides share.
Values go in as float32 [rows, cols] with cols a multiple of 256; bytes come out as uint8
[rows, bytes per row].
"""
from __future__ import annotations

import numpy as np

SUPER = 256


def _half(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16)


def _divide(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """x / scale, 0 where the scale is 0."""
    safe = np.where(scale == 0, 1, scale)
    return np.where(scale == 0, 0, x / safe)


def _super_blocks(values: np.ndarray) -> np.ndarray:
    rows, cols = values.shape
    assert cols % SUPER == 0, cols
    return values.astype(np.float32).reshape(rows * cols // SUPER, SUPER)


def quantize_q4_k(values: np.ndarray) -> np.ndarray:
    """value = d * sc * q - dmin * m: 6-bit sc and m per 32 values, 4-bit q."""
    x = _super_blocks(values).reshape(-1, 8, 32)
    low = np.minimum(x.min(axis=2), 0)
    scale = (x.max(axis=2) - low) / 15
    d = _half(scale.max(axis=1) / 63)
    dmin = _half(-low.min(axis=1) / 63)
    sc = np.clip(np.rint(_divide(scale, d[:, None].astype(np.float32))), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_divide(-low, dmin[:, None].astype(np.float32))), 0, 63).astype(np.uint8)
    step = d.astype(np.float32)[:, None] * sc
    offset = dmin.astype(np.float32)[:, None] * m
    q = np.clip(np.rint(_divide(x + offset[:, :, None], step[:, :, None])), 0, 15).astype(np.uint8)

    scales = np.empty((x.shape[0], 12), np.uint8)
    scales[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    # Each 32 bytes of qs: sub-block 2i in the low nibbles, 2i + 1 in the high ones.
    pairs = q.reshape(-1, 4, 2, 32)
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                             scales, qs], axis=1)
    return blocks.reshape(values.shape[0], -1)


def quantize_q6_k(values: np.ndarray) -> np.ndarray:
    """value = d * scale * (q - 32): an int8 scale per 16 values, 6-bit q."""
    x = _super_blocks(values).reshape(-1, 16, 16)
    scale = np.abs(x).max(axis=2) / 31
    d = _half(scale.max(axis=1) / 127)
    sc = np.clip(np.rint(_divide(scale, d[:, None].astype(np.float32))), -128, 127).astype(np.int8)
    step = d.astype(np.float32)[:, None] * sc
    q = np.clip(np.rint(_divide(x, step[:, :, None])), -32, 31).astype(np.int16) + 32
    q = q.astype(np.uint8).reshape(-1, 2, 4, 32)  # [block][n][k][l]: value 128 n + 32 k + l
    # ql[64 n + 32 (k % 2) + l] holds value k's low four bits, in the high nibble when k >= 2;
    # bits 2k, 2k + 1 of qh[32 n + l] hold its high two.
    low = q & 0x0F
    ql = (low[:, :, 0:2] | (low[:, :, 2:4] << 4)).reshape(-1, 128)
    high = q >> 4
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6))
    blocks = np.concatenate([ql, qh.reshape(-1, 64), sc.view(np.uint8),
                             d.view(np.uint8).reshape(-1, 2)], axis=1)
    return blocks.reshape(values.shape[0], -1)
