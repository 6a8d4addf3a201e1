#!/usr/bin/env bash
# Checks that every layer of the library includes only the layers below it
# (DESIGN.md's layer table) and that only messages/, actors/ and server/
# include CAF. Prints each violation; exits 1 if there is one.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/caflm"

declare -A allowed=(
  [kv]=""
  [scheduler]="kv"
  [sampling]=""
  [gguf]=""
  [model]="gguf"
  [text]="gguf"
  [cpu]="kv scheduler model gguf"
  [cuda]="kv scheduler model gguf"
  [engine]="kv scheduler sampling gguf model text cpu cuda"
  [messages]="kv scheduler sampling gguf model text cpu cuda engine"
  [actors]="kv scheduler sampling gguf model text cpu cuda engine messages"
  [server]="kv scheduler sampling gguf model text cpu cuda engine messages actors"
)
caf_layers=" messages actors server "

status=0
for dir in "$root"/*/; do
  layer=$(basename "$dir")
  if [[ ! -v allowed[$layer] ]]; then
    echo "caflm/$layer/ is not a layer of DESIGN.md"
    status=1
    continue
  fi
  for file in "$dir"*.hpp "$dir"*.cpp "$dir"*.cu "$dir"*.cuh; do
    [[ -e $file ]] || continue
    while IFS= read -r used; do
      [[ $used == "$layer" || " ${allowed[$layer]} " == *" $used "* ]] && continue
      echo "${file#"$root"/} includes caflm/$used/, which is not below $layer/"
      status=1
    done < <(sed -n 's|^#include "caflm/\([a-z_]*\)/.*|\1|p' "$file" | sort -u)
    if [[ $caf_layers != *" $layer "* ]] && grep -q '^#include <caf/' "$file"; then
      echo "${file#"$root"/} includes CAF, which only messages/, actors/ and server/ may"
      status=1
    fi
  done
done
exit $status
