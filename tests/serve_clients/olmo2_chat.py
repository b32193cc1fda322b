"""OLMo 2 Instruct's chat format for the client tests (Python standard library only).

tokenizer_config(): what the model directory's tokenizer_config.json holds for the
server — the committed fixture tests/serve/fixtures/olmo2_instruct_tokenizer_config.json
when it exists, else the fields the server reads from the published
allenai/OLMo-2-1124-7B-Instruct tokenizer_config.json (bos/eos/pad tokens and its Jinja
chat_template, quoted below as published; the 13B Instruct model has the same).

render(messages): the prompt that template gives, written out here by hand from the
format (Tülu 3's: a BOS, then `<|role|>\\n` turns, assistant turns ending in EOS), never
by the server's template interpreter: it is the expected value the tests compare with.
"""
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXTURE = os.path.join(REPO, "tests", "serve", "fixtures", "olmo2_instruct_tokenizer_config.json")

BOS = EOS = "<|endoftext|>"  # id 100257 in the dolma2 tokenizer, also the model's EOS
EOS_ID = 100257

# allenai/OLMo-2-1124-7B-Instruct, tokenizer_config.json, "chat_template" (verbatim).
PUBLISHED_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}"
    "{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}"
    "{% if not loop.last %}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}"
    "{% else %}{{ '<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}"
)


def tokenizer_config():
    """The tokenizer_config.json object to put in the served model's directory."""
    if os.path.exists(FIXTURE):
        with open(FIXTURE, encoding="utf-8") as f:
            return json.load(f)
    return {"bos_token": BOS, "eos_token": EOS, "pad_token": "<|pad|>", "unk_token": EOS,
            "clean_up_tokenization_spaces": False, "tokenizer_class": "GPT2Tokenizer",
            "chat_template": PUBLISHED_TEMPLATE}


def write_tokenizer_config(model_dir):
    """Writes tokenizer_config() into model_dir; returns which source it came from."""
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, indent=1)
    return FIXTURE if os.path.exists(FIXTURE) else "the embedded published template"


def render(messages, add_generation_prompt=True):
    """The text OLMo 2 Instruct's template makes of `messages` (a list of {"role",
    "content"}; roles system, user, assistant; other roles render nothing, as in the
    template)."""
    out = BOS
    for i, m in enumerate(messages):
        last = i == len(messages) - 1
        role, content = m["role"], m["content"]
        if role in ("system", "user"):
            out += f"<|{role}|>\n{content}\n"
        elif role == "assistant":
            out += f"<|assistant|>\n{content}{EOS}" + ("" if last else "\n")
        if last and add_generation_prompt:
            out += "<|assistant|>\n"
    return out


# Conversations the tests send: one user turn; and a system prompt with a finished
# exchange before the last user turn.
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name a colour."},
     {"role": "assistant", "content": "Blue."},
     {"role": "user", "content": "Another one?"}],
]
