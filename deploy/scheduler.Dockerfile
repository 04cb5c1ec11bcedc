# The td3-scheduler: kube-scheduler with the TD3Score plugin. Build from the repository root:
#   docker build -f deploy/scheduler.Dockerfile -t td3-scheduler .
FROM golang:1.26 AS build
WORKDIR /src/scheduler
COPY scheduler/go.mod scheduler/go.sum ./
RUN go mod download
COPY scheduler/ ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/td3-scheduler ./cmd/scheduler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/td3-scheduler /usr/local/bin/td3-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/td3-scheduler"]
