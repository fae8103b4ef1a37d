# The controller image the Helm chart runs: karpenter-core with the AWS provider.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY karpenter_core ./karpenter_core
COPY providers/aws ./providers/aws
RUN pip install --no-cache-dir . ./providers/aws && rm -rf /src
USER 65532:65532
ENTRYPOINT ["karpenter"]
