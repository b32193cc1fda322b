#!/usr/bin/env python3
"""Reading and steering a served model's activations with the openai SDK (docs/guides/activations.md,
"Reading and steering activations"; docs/architecture.md §13). Against a running
`olmo2 serve`:

 1. one request reads, for every layer, the L2 norm per token of the residual stream
    after the layer (layers.*.layer_output) and of what attention and the MLP add to it
    (layers.*.attention_output, layers.*.mlp_output); it prints their means over the
    request's tokens, one row per layer;
 2. a steering vector: the mean of layers.K.layer_output over the prompt tokens of a few
    positive sentences minus the same for a few negative ones (one request per set);
 3. the same greedy continuation without and with coefficient × that vector added to
    layers.K.layer_output at every position.

The fields the SDK does not know go in `extra_body`; what the server adds to a choice
(`activations`) is in `choice.model_extra`. Needs only the standard library and `openai`.
ctest runs it (serve_clients.activations_example, test_activations_example.py) against
a tiny random model.

Usage: activations_example.py [--base-url URL] [--api-key KEY] [--model NAME]
                              [--layer K] [--coefficient C] [--max-tokens N]
The base URL and key default to OPENAI_BASE_URL (else http://127.0.0.1:8000/v1) and
OPENAI_API_KEY; the model to the server's first.
"""
import argparse
import array
import base64
import os
import sys

import openai

SUBLAYERS = ("layer_output", "attention_output", "mlp_output")
POSITIVE = ["I love this, it is wonderful.", "What a beautiful, happy day!", "Thank you, this is great news."]
NEGATIVE = ["I hate this, it is awful.", "What a miserable, sad day.", "Sorry, this is terrible news."]
PROMPT = "My opinion of the new restaurant is that"


def decode(entry):
    """One entry of a choice's `activations`: (its shape, its values as a flat row-major
    list). The server sends `data` as base64 of little-endian float32."""
    values = array.array("f", base64.b64decode(entry["data"]))
    if sys.byteorder == "big":
        values.byteswap()
    return entry["shape"], values.tolist()


def encode(vector):
    """A steering vector ([hidden_size] floats) as the server takes it: base64 of
    little-endian float32."""
    values = array.array("f", vector)
    if sys.byteorder == "big":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def complete(client, model, prompt, max_tokens, activations=None, interventions=None):
    """A greedy completion of `prompt` (a string or a list of them) reading `activations`
    and applying `interventions`; per prompt, (its text, {key: (shape, values)}). Raises
    openai.BadRequestError (400, `param` the field) for a name the model does not have."""
    extra = {}
    if activations:
        extra["activations"] = activations
    if interventions:
        extra["interventions"] = interventions
    resp = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                     extra_body=extra)
    out = []
    for choice in sorted(resp.choices, key=lambda c: c.index):
        read = (choice.model_extra or {}).get("activations", {})
        out.append((choice.text, {key: decode(entry) for key, entry in read.items()}))
    return out


def residual_norms(client, model, prompt, max_tokens=8):
    """One request reading every layer's SUBLAYERS with reduce norm: {layer: {name: the
    mean over the request's tokens of that name's norm}}."""
    reads = [{"name": f"layers.*.{name}", "reduce": "norm"} for name in SUBLAYERS]
    [(_, read)] = complete(client, model, prompt, max_tokens, activations=reads)
    table = {}
    for key, (_, norms) in read.items():  # "layers.3.mlp_output:norm": ([tokens], norms)
        _, layer, name = key.split(":")[0].split(".")
        table.setdefault(int(layer), {})[name] = sum(norms) / len(norms)
    return table


def mean_layer_output(client, model, prompts, layer):
    """The mean over `prompts` of each one's mean of layers.<layer>.layer_output over its
    prompt tokens ([hidden_size]); one request for all of them."""
    reads = [{"name": f"layers.{layer}.layer_output", "reduce": "mean", "positions": "prompt"}]
    means = [read[f"layers.{layer}.layer_output:mean"][1]
             for _, read in complete(client, model, prompts, 1, activations=reads)]
    return [sum(column) / len(means) for column in zip(*means)]


def steering_vector(client, model, layer, toward, away):
    """mean_layer_output of the prompts `toward` minus that of the prompts `away`."""
    a = mean_layer_output(client, model, toward, layer)
    b = mean_layer_output(client, model, away, layer)
    return [x - y for x, y in zip(a, b)]


def steer(layer, vector, coefficient):
    """The `interventions` field adding coefficient·vector to layers.<layer>.layer_output
    at every position, prompt and generated."""
    return [{"type": "add", "name": f"layers.{layer}.layer_output", "vector": encode(vector),
             "coefficient": coefficient, "positions": "all"}]


def demo(client, model, layer=None, coefficient=4.0, max_tokens=12):
    """Prints the norms of PROMPT's residual stream and sublayer outputs per layer, then
    PROMPT's greedy continuation without and with the POSITIVE − NEGATIVE steering vector
    at `layer` (default: the middle one) times `coefficient`."""
    table = residual_norms(client, model, PROMPT)
    print("mean L2 norm over the tokens of", repr(PROMPT))
    print(f"{'layer':>5} {'residual':>10} {'attention':>10} {'mlp':>10}")
    for k, row in sorted(table.items()):
        print(f"{k:5d} {row['layer_output']:10.3f} {row['attention_output']:10.3f} {row['mlp_output']:10.3f}")

    layer = len(table) // 2 if layer is None else layer
    vector = steering_vector(client, model, layer, POSITIVE, NEGATIVE)
    [(before, _)] = complete(client, model, PROMPT, max_tokens)
    [(after, _)] = complete(client, model, PROMPT, max_tokens, interventions=steer(layer, vector, coefficient))
    size = sum(x * x for x in vector) ** 0.5
    print(f"steering layers.{layer}.layer_output by {coefficient:g} × (positive − negative), |v| = {size:.3f}")
    print(f"before: {PROMPT + before!r}")
    print(f"after:  {PROMPT + after!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"))
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    p.add_argument("--model", help="default: the server's first model")
    p.add_argument("--layer", type=int, help="the layer to steer (default: the middle one)")
    p.add_argument("--coefficient", type=float, default=4.0)
    p.add_argument("--max-tokens", type=int, default=12)
    args = p.parse_args(argv)
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key)
    demo(client, args.model or client.models.list().data[0].id, args.layer, args.coefficient, args.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
