# The decision engine (td3sched serve): ONNX Runtime inference, no torch. Build from the repository root:
#   docker build -f deploy/engine.Dockerfile -t td3sched-engine .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ src/
COPY proto/ proto/
RUN python -m venv /venv \
 && /venv/bin/pip install --no-cache-dir '.[engine]' \
 && mkdir -p /tmp/stubs \
 && /venv/bin/python -m grpc_tools.protoc -Iproto --python_out=/tmp/stubs --grpc_python_out=/tmp/stubs \
      --pyi_out=/tmp/stubs proto/td3sched/engine/v1/engine.proto \
 && cp -r /tmp/stubs/td3sched/engine/v1 "$(/venv/bin/python -c 'import td3sched.engine, os; print(os.path.dirname(td3sched.engine.__file__))')/v1"

FROM python:3.11-slim
COPY --from=build /venv /venv
COPY models/ /models/
USER 65532:65532
EXPOSE 50051 8888
ENTRYPOINT ["/venv/bin/td3sched"]
CMD ["serve", "--config", "/etc/td3sched/engine-config.yaml"]
