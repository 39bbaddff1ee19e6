# attn-doctor on top of an NVIDIA PyTorch image. The base image's torch, CUDA, cuDNN,
# flash-attn and TransformerEngine are what the doctor diagnoses: installing attn-doctor adds
# only its small pure-Python dependencies and never changes them (pip's --no-deps for the
# project itself plus an explicit, torch-free dependency list).
#
#   docker build -t attn-doctor .
#   docker run --rm --gpus all attn-doctor check
#   docker build --build-arg BASE=my-registry/my-training:image -t my-training-doctor .
ARG BASE=nvcr.io/nvidia/pytorch:25.01-py3
FROM ${BASE}

COPY . /opt/attn-doctor
RUN python -m pip install --no-cache-dir "typer>=0.12" "rich>=13.7" "packaging>=23.0" "pyyaml>=6.0" "nvidia-ml-py>=12.535" "jsonschema>=4.18" \
 && python -m pip install --no-cache-dir --no-deps /opt/attn-doctor \
 && attn-doctor rules list >/dev/null

ENTRYPOINT ["attn-doctor"]
CMD ["check"]
