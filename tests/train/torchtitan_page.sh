#!/bin/sh
# Runs every ```sh block of docs/torchtitan.md, in order, in one shell, as a user would on a TorchTitan
# checkout, so the page cannot rot. The checkout is a stand-in: TorchTitan v0.2.2's debug_model.toml,
# a byte-level tokenizer.json and a small c4_test, all written here.
# $FSDP/train/fsdp-train is a wrapper adding --training.seq_len 64 --training.local_batch_size 2 (a few
# seconds a run); torchrun gets a port the kernel picked for the page's fixed 29500. A block after
# "<!-- page-test: needs X -->" runs only where X is (mpirun; torchrun where PYTHON has torch).
#   torchtitan_page.sh PAGE BUILD_DIR PYTHON
set -eu
page=$1 build=$2 python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tt=$work/torchtitan fsdp=$work/fsdp bin=$work/bin
mkdir -p "$tt/torchtitan/models/llama3/train_configs" "$tt/tests/assets/tokenizer" "$tt/tests/assets/c4_test" \
  "$fsdp/train" "$fsdp/launch" "$fsdp/runtime/checkpoint" "$bin"

# TorchTitan v0.2.2's file, kept once in the project: config_torchtitan_test.cc's kDebugModelToml.
python3 - "$(dirname "$0")/config_torchtitan_test.cc" \
  >"$tt/torchtitan/models/llama3/train_configs/debug_model.toml" <<'EOF'
import re, sys
print(re.search(r'kDebugModelToml = R"\((.*?)\)";', open(sys.argv[1]).read(), re.S).group(1), end="")
EOF

# The tokenizer (GPT-2's 256 byte characters, BOS and EOS) and 300 documents of c4_test.
python3 - "$tt/tests/assets" <<'EOF'
import json, random, sys
assets = sys.argv[1]
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
chars, extra = {}, 0
for b in range(256):
    chars[b] = chr(b) if b in printable else chr(256 + extra)
    extra += b not in printable
vocab = {chars[b]: b for b in range(256)}
tok = {"added_tokens": [{"id": 256, "content": "<|begin_of_text|>", "special": True},
                        {"id": 257, "content": "<|end_of_text|>", "special": True}],
       "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
       "post_processor": None, "model": {"type": "BPE", "vocab": vocab, "merges": []}}
json.dump(tok, open(f"{assets}/tokenizer/tokenizer.json", "w"))
json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
          open(f"{assets}/tokenizer/tokenizer_config.json", "w"))
words = "every rank holds a shard of each layer and gathers the rest just before it computes".split()
rng = random.Random(0)
with open(f"{assets}/c4_test/data.json", "w") as f:
    for i in range(300):
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(60)), "url": f"doc{i}"}) + "\n")
EOF

cat >"$fsdp/train/fsdp-train" <<EOF
#!/bin/sh
exec "$build/train/fsdp-train" "\$@" --training.seq_len 64 --training.local_batch_size 2
EOF
chmod +x "$fsdp/train/fsdp-train"
ln -s "$build/launch/fsdp-run" "$fsdp/launch/fsdp-run"
ln -s "$build/runtime/checkpoint/fsdp-ckpt" "$fsdp/runtime/checkpoint/fsdp-ckpt"
if "$python" -c 'import torch.distributed.run' 2>/dev/null; then
  cat >"$bin/torchrun" <<EOF
#!/bin/sh
port=\$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
args=""
for a in "\$@"; do [ "\$a" = 29500 ] && a=\$port; args="\$args '\$a'"; done
eval exec "$python" -m torch.distributed.run --monitor_interval 0.2 \$args
EOF
  chmod +x "$bin/torchrun"
fi
if real=$(command -v mpirun); then
  printf '#!/bin/sh\nexec %s --oversubscribe "$@"\n' "$real" >"$bin/mpirun"
  chmod +x "$bin/mpirun"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TORCHTITAN="$tt" FSDP="$fsdp" PATH="$bin:$PATH"

# The page's sh blocks, each announced; a block whose needs are missing is announced as skipped.
python3 - "$page" "$bin" >"$work/page.sh" <<'EOF'
import os, re, sys
page, bin_dir = sys.argv[1], sys.argv[2]
text = open(page).read()
print("set -eu")
for n, m in enumerate(re.finditer(r"(?:<!-- page-test: needs (\S+) -->\n)?```sh\n(.*?)```", text, re.S), 1):
    need, body = m.group(1), m.group(2)
    if need and not os.access(os.path.join(bin_dir, need), os.X_OK):
        print(f"echo '--- block {n}: skipped, no {need}'")
        continue
    print(f"echo '--- block {n}'")
    print(body)
EOF
if ! sh "$work/page.sh" >"$work/log" 2>&1; then
  cat "$work/log"; echo "a block of $page failed"; exit 1
fi
cat "$work/log"
for want in "keys with no effect here:" "[default0]:fsdp-train: Llama 3 debug training: 2 rank(s) from torchrun" "resumed from ./outputs/checkpoint/step-10" \
  "exported 57 tensors of outputs/checkpoint/step-20"; do
  case $want in "[default0]"*) [ -x "$bin/torchrun" ] || continue ;; esac  # torchrun's tee prefix
  grep -qF "$want" "$work/log" || { echo "missing from the page's run: $want"; exit 1; }
done
echo "docs/torchtitan.md: every block ran"
