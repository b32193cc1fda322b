"""The activations guide's example (activations_example.py) against a running server
(docs/architecture.md §13): the script runs as a program and prints its table and both
continuations; its reads have the documented shapes; a norm read equals the norm of the
full tensor read in the same request, and a mean read the mean of the full tensors; the
full tensors satisfy the residual identity; steering changes the greedy continuation and
a coefficient of 0 does not; a name the model lacks is a 400 naming it."""
import math
import os
import subprocess
import sys
import unittest

import openai

import activations_example as ex
import harness
from harness import MODEL_NAME, SdkCase

HIDDEN = harness.MODEL_CONFIG["hidden_size"]
LAYERS = harness.MODEL_CONFIG["num_hidden_layers"]
# Large enough to change the random model's greedy continuation (its |v| is about 6;
# 0.5 already does), small enough to keep the logits finite.
COEFFICIENT = 4.0
MAX_TOKENS = 6
TOL = 1e-4  # relative, on values of order 1 … 20


def row_norms(shape, values):
    """The L2 norm of each row of a [rows, features] tensor."""
    rows, features = shape
    return [math.sqrt(sum(v * v for v in values[r * features:(r + 1) * features])) for r in range(rows)]


class GuideShowsTheScript(unittest.TestCase):
    def test_the_guide_excerpt_is_the_script(self):
        """docs/guides/activations.md's python block in "Reading and steering activations"
        is the script's text, in pieces separated by "# …" lines."""
        with open(os.path.join(harness.REPO, "docs", "guides", "activations.md"), encoding="utf-8") as f:
            guide = f.read()
        section = guide[guide.index("## Reading and steering activations"):]
        block = section[section.index("```python\n") + len("```python\n"):section.index("\n```\n")]
        with open(ex.__file__, encoding="utf-8") as f:
            script = f.read()
        for piece in block.split("\n# …\n"):
            self.assertIn(piece, script)
        self.assertIn("def demo(", block)


class ActivationsExample(SdkCase):
    def assert_close(self, got, want, what):
        self.assertEqual(len(got), len(want), what)
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertLessEqual(abs(g - w), TOL * max(1.0, abs(w)), f"{what}[{i}]: {g} against {w}")

    def test_the_script_runs(self):
        env = dict(os.environ, OPENAI_BASE_URL=f"{self.ctx.server.base}/v1", OPENAI_API_KEY=self.ctx.server.key)
        out = subprocess.run([sys.executable, ex.__file__, "--coefficient", str(COEFFICIENT)], env=env,
                             capture_output=True, text=True, timeout=harness.REQUEST_TIMEOUT)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        rows = [line.split() for line in lines[2:2 + LAYERS]]
        self.assertEqual([int(r[0]) for r in rows], list(range(LAYERS)), out.stdout)
        for r in rows:  # the random model's norm weights are ones: sublayer outputs have norm √hidden
            self.assertGreater(float(r[1]), 0.0)
            self.assertAlmostEqual(float(r[2]), math.sqrt(HIDDEN), places=2)
            self.assertAlmostEqual(float(r[3]), math.sqrt(HIDDEN), places=2)
        before = [line for line in lines if line.startswith("before: ")]
        after = [line for line in lines if line.startswith("after:  ")]
        self.assertEqual(len(before), 1, out.stdout)
        self.assertEqual(len(after), 1, out.stdout)
        self.assertNotEqual(before[0][8:], after[0][8:], out.stdout)

    def test_norm_reads_equal_the_norms_of_the_tensors(self):
        names = ex.SUBLAYERS + ("layer_input",)
        reads = [{"name": f"layers.*.{n}", "reduce": "norm"} for n in ex.SUBLAYERS] + [f"layers.*.{n}" for n in names]
        [(_, read)] = ex.complete(self.client, MODEL_NAME, ex.PROMPT, MAX_TOKENS, activations=reads)
        tokens = len(self.refs.tokenize(ex.PROMPT)) + MAX_TOKENS - 1  # the last token is never fed
        self.assertEqual(len(read), LAYERS * (len(ex.SUBLAYERS) + len(names)), sorted(read))
        table = ex.residual_norms(self.client, MODEL_NAME, ex.PROMPT, MAX_TOKENS)
        self.assertEqual(sorted(table), list(range(LAYERS)))
        for layer in range(LAYERS):
            full = {n: read[f"layers.{layer}.{n}"] for n in names}
            for n in names:
                self.assertEqual(full[n][0], [tokens, HIDDEN], n)
            for n in ex.SUBLAYERS:
                shape, norms = read[f"layers.{layer}.{n}:norm"]
                self.assertEqual(shape, [tokens], n)
                self.assert_close(norms, row_norms(*full[n]), f"layers.{layer}.{n}:norm")
                self.assert_close([table[layer][n]], [sum(norms) / tokens], f"residual_norms()[{layer}][{n}]")
            summed = [a + b + c for a, b, c in zip(full["layer_input"][1], full["attention_output"][1],
                                                   full["mlp_output"][1])]
            self.assert_close(full["layer_output"][1], summed, f"layers.{layer}: input + attention + mlp")

    def test_mean_reads_equal_the_means_of_the_tensors(self):
        layer = LAYERS // 2
        got = ex.mean_layer_output(self.client, MODEL_NAME, ex.POSITIVE, layer)
        self.assertEqual(len(got), HIDDEN)
        reads = [{"name": f"layers.{layer}.layer_output", "positions": "prompt"}]
        choices = ex.complete(self.client, MODEL_NAME, ex.POSITIVE, 1, activations=reads)
        self.assertEqual(len(choices), len(ex.POSITIVE))
        means = []
        for prompt, (_, read) in zip(ex.POSITIVE, choices):
            shape, values = read[f"layers.{layer}.layer_output"]
            self.assertEqual(shape, [len(self.refs.tokenize(prompt)), HIDDEN], prompt)
            means.append([sum(values[t * HIDDEN + f] for t in range(shape[0])) / shape[0] for f in range(HIDDEN)])
        self.assert_close(got, [sum(c) / len(means) for c in zip(*means)], "mean_layer_output")

    def test_steering_changes_the_continuation(self):
        layer = LAYERS // 2
        vector = ex.steering_vector(self.client, MODEL_NAME, layer, ex.POSITIVE, ex.NEGATIVE)
        self.assertEqual(len(vector), HIDDEN)
        self.assertGreater(sum(x * x for x in vector), 0.0)
        [(before, _)] = ex.complete(self.client, MODEL_NAME, ex.PROMPT, MAX_TOKENS)
        self.assertEqual(before, self.refs.generate(MAX_TOKENS, text=ex.PROMPT)["text"])
        [(after, _)] = ex.complete(self.client, MODEL_NAME, ex.PROMPT, MAX_TOKENS,
                                   interventions=ex.steer(layer, vector, COEFFICIENT))
        self.assertNotEqual(after, before)
        [(zero, _)] = ex.complete(self.client, MODEL_NAME, ex.PROMPT, MAX_TOKENS,
                                  interventions=ex.steer(layer, vector, 0.0))
        self.assertEqual(zero, before)  # x + 0·v = x exactly

    def test_a_wrong_name_is_a_400_naming_it(self):
        cases = {
            "layers.0.residual": ({"activations": ["layers.0.residual"]}, "activations[0]"),
            f"layers.{LAYERS}.layer_output": ({"activations": [{"name": f"layers.{LAYERS}.layer_output",
                                                                "reduce": "norm"}]}, "activations[0].name"),
            "layers.0.mlp_neurons": ({"interventions": [{"type": "add", "name": "layers.0.mlp_neurons",
                                                         "vector": ex.encode([1.0] * HIDDEN)}]},
                                     "interventions[0].name"),
        }
        for name, (extra, param) in cases.items():
            with self.subTest(name):
                with self.assertRaises(openai.BadRequestError) as e:
                    ex.complete(self.client, MODEL_NAME, ex.PROMPT, 2, **extra)
                self.assertEqual(e.exception.status_code, 400)
                self.assertEqual(e.exception.param, param, e.exception.body)
                self.assertIn(name, e.exception.message)
