#!/bin/bash
# Pack what ci/gpu/serve.sh needs into .gpu-lane/gpuserve/ of the checkout the device tool sends (default /work/main):
# the committed tree of THIS checkout (src.tgz + src.commit: the device runs exactly this commit, in $T/src, whatever
# the sending checkout's working tree holds) and speculators 0.9.0 with what the GPU image lacks for its client
# (spec09/: hs-connectors 0.9.0, datasets 5.1.0, dill, multiprocess, loguru, pydantic-settings, python-dotenv).
set -euo pipefail
DEST=${1:-/work/main}/.gpu-lane/gpuserve
mkdir -p "$DEST/spec09"
git archive --format=tar.gz -o "$DEST/src.tgz" HEAD
git rev-parse --short HEAD > "$DEST/src.commit"
PLAT=""; for p in manylinux_2_17 manylinux_2_28 manylinux2014; do PLAT="$PLAT --platform ${p}_x86_64"; done
for s in speculators==0.9.0 hs-connectors==0.9.0 datasets==5.1.0 dill==0.4.1 multiprocess==0.70.19 loguru==0.7.3 \
         pydantic-settings==2.16.3 python-dotenv==1.2.4; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
      -d "$DEST/spec09" "$s"
done
du -sh "$DEST"/*
