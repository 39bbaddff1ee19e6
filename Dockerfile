# attn-doctor on top of an NVIDIA PyTorch image. The base image's torch, CUDA, cuDNN,
# flash-attn and TransformerEngine are what the doctor diagnoses: attn-doctor does not depend
# on any of them (tests/test_packaging.py holds this), so installing it adds only its small
# pure-Python dependencies (typer, rich, packaging, pyyaml, nvidia-ml-py, jsonschema).
#
#   docker build -t attn-doctor .
#   docker run --rm --gpus all attn-doctor check
#   docker build --build-arg BASE=my-registry/my-training:image -t my-training-doctor .
ARG BASE=nvcr.io/nvidia/pytorch:25.01-py3
FROM ${BASE}

COPY . /opt/attn-doctor
RUN python -m pip freeze | grep -iE "^(torch|flash.attn|transformer.engine|nvidia.cudnn)" > /tmp/before.txt \
 && python -m pip install --no-cache-dir /opt/attn-doctor \
 && python -m pip freeze | grep -iE "^(torch|flash.attn|transformer.engine|nvidia.cudnn)" | diff /tmp/before.txt - \
 && attn-doctor rules list >/dev/null

ENTRYPOINT ["attn-doctor"]
CMD ["check"]
