#!/bin/bash
# The torch that vLLM >= 0.33 pins (torch==2.14.0), for a GPU image that holds torch 2.11.0.
# torch 2.14.0 needs NCCL >= 2.30 (the image's NCCL lacks ncclCommResume) and a torchvision built for it; the
# image's Triton 3.6 and CUDA 13 libraries serve it (cuDNN is 9.19 there against the 9.24 torch was built for: the
# runs keep cuDNN off, which no LLM path uses).  Runs on a machine with package-registry access; writes
# $GPU_LANE_DIR/sendt/NN/, one folder per transfer (each call carries one folder beside the checkout, under the
# device tool's 64 MiB), and $GPU_LANE_DIR/sendt/t.sha256.  On the device: `device.sh take DIR` for each folder,
# then `device.sh torch` joins, checks and installs them into $GPU_LANE_TMP/torch, which every step then puts first
# on PYTHONPATH.
set -euo pipefail
G=$(mkdir -p "${GPU_LANE_DIR:-.gpu-lane-034}" && cd "${GPU_LANE_DIR:-.gpu-lane-034}" && pwd); cd "$G"
PART=${GPU_LANE_PART_MIB:-50}  # the checkout (~8 MB) travels with every part
PLAT=""; for p in manylinux_2_17 manylinux_2_18 manylinux_2_24 manylinux_2_27 manylinux_2_28; do PLAT="$PLAT --platform ${p}_x86_64"; done
DL="python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT --platform manylinux2014_x86_64"
rm -rf torchw && mkdir -p torchw
for s in torch==2.14.0 nvidia-nccl-cu13==2.30.7 torchvision==0.29.0; do $DL -d torchw "$s"; done
# what vLLM 0.34.0's CUDA path imports and the GPU image lacks (its METADATA against 0.26.0's; measured on an H100,
# 2026-12-07): FLASH_ATTN_MLA's engine start imports vllm/v1/attention/backends/flashinfer.py ('No module named
# flashinfer' without it) and the CUDA kernel warm-up of every model imports cutlass, quack and cuda.bindings
# (gpu_worker.py:1070 -> kernel_warmup.py:366-372 -> models/minimax_m3/nvidia/ops/index_decode_score.py:16-21,
# unguarded: 'No module named cutlass'; device.sh and serve.sh put cutlass's dsl_packages folder on PYTHONPATH);
# httpcore2 (the API server's HTTP client) imports truststore.  FlashInfer 0.7.3, vLLM's pin, is not on the
# registry: 0.7.4, with its own requirements.
for s in flashinfer-python==0.7.4 nvidia-cutlass-dsl==4.8.0 nvidia-cutlass-dsl-libs-base==4.8.0 \
         nvidia-cutlass-dsl-libs-core==4.8.0 nvidia-cutlass-dsl-libs-cu13==4.8.0 quack-kernels==0.6.5 \
         nvidia-cudnn-frontend==1.32.0 cuda-python==13.4.4 cuda-bindings==13.4.4 cuda-core==1.2.2 cuda-pathfinder \
         cuda-tile==1.7.0 nccl4py==0.6.0 nccl-extensions==0.1.0 nvidia-ml-py truststore==0.10.5 \
         tabulate einops ninja; do
  $DL -d torchw "$s"; done
rm -rf sendt && mkdir -p sendt
tar -C torchw -cf t.tar $(cd torchw && ls *.whl)
sha256sum t.tar | cut -d' ' -f1 > sendt/t.sha256
split -b "${PART}M" -d -a 2 t.tar sendt/t.part.
for f in sendt/t.part.*; do n=${f##*.}; mkdir -p "sendt/$n" && mv "$f" "sendt/$n/"; done
cp sendt/t.sha256 "sendt/$(ls sendt | grep -v sha | tail -1)/"  # the last transfer brings the checksum
rm -f t.tar
du -sb sendt/* | sort -k2
