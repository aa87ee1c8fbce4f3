# syntax=docker/dockerfile:1
# Static xds-server on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/xds-server ./cmd/xds-server

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/xds-server /xds-server
# 65532 is distroless's "nonroot"; numeric so runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 18000 18080
ENTRYPOINT ["/xds-server"]
