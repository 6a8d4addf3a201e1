#!/usr/bin/env bash
# Installs the built caflm into a scratch prefix, builds examples/embedding
# against the installed package with the consumer's own flags, and runs it on
# a random model. Fails if the package leaks caflm's build flags (-Werror,
# -march) to the consumer or an installed header includes something other
# than <caflm/...> or a dependency's header.
#
#   install_and_embed.sh BUILD_DIR SOURCE_DIR SCRATCH_DIR
set -euo pipefail
build=$1 source=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log"

# Installed headers name each other as caflm/...; nothing may reach back
# into the source tree.
if grep -rn '#include "' "$prefix/include/caflm" | grep -v '#include "caflm/'; then
  echo "installed headers include files outside <caflm/...>" >&2
  exit 1
fi

# The consumer links with the build's own linker flags: none normally; a
# sanitizer build's static libraries need their sanitizer's run-time library.
linker_flags=$(sed -n 's/^CMAKE_EXE_LINKER_FLAGS:[A-Z]*=//p' "$build/CMakeCache.txt")
cmake -S "$source/examples/embedding" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_EXE_LINKER_FLAGS="$linker_flags" >"$work/configure.log"
if grep -E -- '-Werror|-march|-mtune' "$work/build/compile_commands.json"; then
  echo "the installed package pushes caflm's build flags onto its consumer" >&2
  exit 1
fi
cmake --build "$work/build" >"$work/build.log"

"$prefix/bin/caflm" make-test-model --out "$work/model.gguf" --arch llama --dim 64 --layers 2 \
  --heads 4 --kv-heads 2 --ffn 128 --type f32 --seed 1
"$work/build/embedding" "$work/model.gguf"
