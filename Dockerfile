# syntax=docker/dockerfile:1
# The xds-server image for those who build with Docker. `make image` builds
# the same image without a Docker engine (hack/image): the static binary
# alone on an empty base, no shell, no libc, no CA bundle (the server trusts
# the service account's CA and serves its own certificates). hack/image's
# TestDockerfileAgrees holds the two to the same user, entrypoint, ports and
# build flags.

# Build stage only: nothing of it ships. For a reproducible build, pin it by
# digest (docker buildx imagetools inspect golang:1.26 prints it):
#   FROM golang:1.26@sha256:<digest> AS build
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# .git stays out of the build context, so the toolchain cannot stamp the
# commit: pass it, or --version and ringxds_build_info read "devel" and
# "unknown" and replicas of different builds look alike:
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) .
ARG VERSION=
ARG REVISION=
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w -X github.com/ringxds/ringxds/internal/buildinfo.version=${VERSION} -X github.com/ringxds/ringxds/internal/buildinfo.revision=${REVISION}" -o /out/xds-server ./cmd/xds-server

# No base image, so no base image to pin or patch.
FROM scratch
COPY --from=build /out/xds-server /xds-server
# distroless' "nonroot", numeric so that runAsNonRoot can verify it without
# an /etc/passwd.
USER 65532:65532
EXPOSE 18000 18080
ENTRYPOINT ["/xds-server"]
